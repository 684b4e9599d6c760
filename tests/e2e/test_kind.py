"""The e2e on a real cluster: kind + skaffold (opt in with --e2e; needs Docker, kind, skaffold).

Creates a kind cluster named pdfqueue-e2e-<random> from k8s/kind-cluster.yaml, deploys with
`skaffold run -p kind` (images built locally and loaded into kind), port-forwards the API, runs
tests/support/e2e/scenario.py (upload, counts, workers scaled up from zero and back), and deletes the
cluster. It never touches a kube context it did not create (see tests/support/e2e/kind.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.e2e.kind import KindDriver
from tests.support.e2e.scenario import run_scenario

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]


@pytest.fixture
def kind_driver(tmp_path: Path) -> Iterator[KindDriver]:
    driver = KindDriver(tmp_path)
    try:
        driver.start()
        yield driver
    finally:
        driver.stop()


def test_kind_e2e(kind_driver: KindDriver, tmp_path: Path) -> None:
    seen = run_scenario(kind_driver, tmp_path, files=120, settle_s=300, batch_s=600)
    counts = [n for _, n in seen.replicas]
    assert counts[-1] == 0, counts
