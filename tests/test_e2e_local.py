"""The kind e2e scenario (tests/support/e2e/scenario.py) on every CI run, with local processes.

The chart is installed on the local control plane and its API, operator and workers run here,
configured only from what the chart rendered (tests/support/e2e/local.py). What this proves beyond the
kind run's reach in CI: the chart's environment is complete and correct for each process, the
operator works with exactly the chart's RBAC, and its scaling decisions drive the workers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.e2e.local import LocalDriver
from tests.support.e2e.scenario import run_scenario
from tests.support.kubefix import KubeCluster

pytestmark = [pytest.mark.kube, pytest.mark.timeout(900)]


@pytest.fixture
def local_driver(
    kube_cluster: KubeCluster, services: dict[str, str], tmp_path: Path
) -> Iterator[LocalDriver]:
    kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(Path(__file__).parents[1] / "k8s/crds/pdfbatches.pdfqueue.io.yaml"),
    )
    driver = LocalDriver(kube_cluster, services, tmp_path)
    try:
        driver.start()
        yield driver
    finally:
        driver.stop()


def test_e2e_scenario_with_the_charts_processes(local_driver: LocalDriver, tmp_path: Path) -> None:
    # 1,200 PDFs: one local worker must not drain the backlog between two of the operator's
    # 1 s ticks. 60 did once ([1, 0, 1, 0]); 300 did too once workers started their parsing
    # processes before their first job and parsed at 300-400 PDFs/s; 1,200 take it seconds.
    seen = run_scenario(local_driver, tmp_path, files=1200)
    # scaled from zero, up, and back to zero; the workers that ran were the operator's doing
    counts = [n for _, n in seen.replicas]
    idle = counts.index(0)
    assert max(counts[idle:]) >= 2, counts  # 1,200 PDFs at 20 per replica: more than one
    assert counts[-1] == 0, counts
