"""The real-pod tests run by default where containers can run, and say in one line why not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.chartfix import ROOT

NOBODY = 65534
PODS_TESTS = 10  # tests in tests/test_e2e_pods.py


def _as_nobody(argv: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def _pytest_pods(*args: str, env: dict[str, str]) -> str:
    """Run pytest on the real-pod module in a child process; its summary lines."""
    argv = [sys.executable, "-m", "pytest", "tests/test_e2e_pods.py", "-q", "-rsE"]
    argv += ["-p", "no:cacheprovider", *args]
    proc = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return proc.stdout + proc.stderr


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PDFQUEUE_PODS"}
    return {**env, **extra}


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("these checks drop from root to nobody")


def test_node_check_as_non_root_exits_3_with_one_line(as_root: None) -> None:
    # pytest's tmp_path is root's alone: nobody needs a folder of its own
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp).chmod(0o777)
        node = Path(tmp) / "node"
        proc = subprocess.run(
            _as_nobody(["bash", str(ROOT / "tools/kube.sh"), "node-check", str(node)]),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        made = sorted(p.name for p in node.rglob("*"))
    assert proc.returncode == 3
    assert proc.stderr.splitlines() == [
        "kube: real node: needs root (containerd, runc, network namespaces, iptables)"
    ]
    assert proc.stdout == ""
    # nothing but kube.sh's own empty state folders
    assert made == ["logs", "run"]


@pytest.mark.parametrize("how", [["--no-pods"], ["PDFQUEUE_PODS=0"]])
def test_pods_turned_off_skip_every_test_with_the_reason(how: list[str]) -> None:
    args = [a for a in how if a.startswith("--")]
    extra = dict(a.split("=", 1) for a in how if "=" in a)
    out = _pytest_pods(*args, env=_env(**extra))
    assert f"{PODS_TESTS} skipped" in out
    assert re.search(
        r"SKIPPED \[\d+\] .*real-pod tests turned off \(--no-pods or PDFQUEUE_PODS=0\)", out
    )
    assert "passed" not in out
    assert "error" not in out
