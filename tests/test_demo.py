"""`pdfqueue demo` as a user runs it: the batch's summary, then its processes until stopped."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import free_port, wait_until
from tests.support.helpers import settings_env


def running_in(folder: Path) -> list[int]:
    """Processes whose working directory is `folder` (the demo's children inherit its own)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(proc / "cwd").resolve() == folder.resolve():
                found.append(int(proc.name))
        except OSError:
            continue  # gone, or not ours to look at
    return found


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_demo_stops_its_api_and_workers_with_it(
    stop: signal.Signals, settings: Settings, tmp_path: Path
) -> None:
    """SIGTERM used to end the demo alone and leave its API and workers running."""
    port = free_port()
    env = settings_env(settings)
    env.pop("PDFQUEUE_USERS_TABLE", None)  # the demo has a table of its own
    env.pop("PDFQUEUE_API_TOKENS", None)  # and makes its own token, as for a user
    command = [sys.executable, "-m", "pdfqueue.cli.main", "demo", "--files", "20"]
    with subprocess.Popen(
        [*command, "--workers", "1", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    ) as demo:
        try:
            stopped_with(demo, stop, port, tmp_path)
        finally:
            demo.kill()  # a no-op once it has exited


def stopped_with(
    demo: subprocess.Popen[str], stop: signal.Signals, port: int, tmp_path: Path
) -> None:
    """Wait for the demo to serve, send it `stop`, check that it took its children along."""
    assert demo.stderr is not None
    seen = []
    for line in demo.stderr:
        seen.append(line)
        if "Ctrl-C stops them" in line:
            break
    assert any("20 PDFs in" in line for line in seen), "".join(seen)
    assert listening(port)
    children = set(running_in(tmp_path)) - {demo.pid}
    assert len(children) >= 2  # the API and the worker (and its parsing processes)
    demo.send_signal(stop)
    assert demo.wait(60) == 0
    assert "stopped the API and workers" in demo.stderr.read()
    wait_until(lambda: not listening(port), "the API stopped", 10)
    wait_until(lambda: not running_in(tmp_path), "the demo's processes gone", 10)
    logs = tmp_path / ".pdfqueue/demo"
    assert sorted(p.name for p in logs.glob("*.log")) == ["api.log", "worker-1.log"]
