"""`pdfqueue demo` as a user runs it: the batch's summary, its processes until stopped, and the
README's tour against it, verbatim, in a fresh shell."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import free_port, free_ports, wait_until
from tests.support.helpers import settings_env

ROOT = Path(__file__).resolve().parents[1]
DEMO = [sys.executable, "-m", "pdfqueue.cli.main", "demo"]
SERVING = "Ctrl-C stops them"
TOUR_MARKER = "<!-- tour: local -->"  # the docs mark each tour `<!-- tour: NAME -->`
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""A fresh shell's PATH on Debian: no ~/.local/bin, where `make deps` may have put uv."""
EXIT_FILES_FAILED = 3  # `upload --wait` on the demo's résumés: some are broken on purpose
README = (ROOT / "README.md").read_text()


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


def demo_env(settings: Settings) -> dict[str, str]:
    """The test's services, as the demo's own; the uv that runs this test, as make's."""
    env = settings_env(settings)
    env.pop("PDFQUEUE_USERS_TABLE", None)  # the demo has a table of its own
    env.pop("PDFQUEUE_API_TOKENS", None)  # and makes its own token, as for a user
    uv = env.get("UV") or shutil.which("uv")
    assert uv, "no uv here: the tour runs `uv run`"
    env["UV"] = uv
    return env


@contextmanager
def demo(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """The demo in a process group of its own (as a terminal runs it), killed if the test
    fails; on the way out, every process it started must be gone."""
    popen = subprocess.Popen(
        argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    with popen as proc:  # closes its stderr
        try:
            yield proc
        finally:
            proc.kill()  # a no-op once it has exited
            proc.wait()
    wait_until(lambda: not running_in(cwd), "the demo's processes gone", 15)


def read_until(proc: subprocess.Popen[str], text: str) -> str:
    """The demo's stderr up to the first line holding `text`."""
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"the demo ended before {text!r}:\n{''.join(seen)}")


def stopped_with(proc: subprocess.Popen[str], stop: signal.Signals, cwd: Path) -> str:
    """Send `stop` as a terminal does (to the demo's process group); the demo must exit 0,
    say how to stop its services and take every child along. Its stderr from here on."""
    assert proc.stderr is not None
    os.killpg(proc.pid, stop)
    assert proc.wait(60) == 0
    rest = proc.stderr.read()
    assert "`make demo-stop` stops them" in rest
    wait_until(lambda: not running_in(cwd), "the demo's processes gone", 15)
    return rest


@contextmanager
def port_taken(port: int) -> Iterator[None]:
    """`port` held on loopback for the block (if another process holds it, it is taken too)."""
    with socket.socket() as sock:
        with suppress(OSError):
            sock.bind(("127.0.0.1", port))
            sock.listen()
        yield


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_demo_stops_its_api_and_workers_with_it(
    stop: signal.Signals, settings: Settings, tmp_path: Path
) -> None:
    """SIGTERM used to end the demo alone and leave its API and workers running."""
    port = free_port()
    argv = [*DEMO, "--files", "20", "--workers", "1", "--port", str(port)]
    with demo(argv, tmp_path, demo_env(settings)) as proc:
        seen = read_until(proc, SERVING)
        assert "20 PDFs in" in seen
        assert listening(port)
        assert len(set(running_in(tmp_path)) - {proc.pid}) >= 2  # the API, the worker
        stopped_with(proc, stop, tmp_path)
        assert not listening(port)
    logs = tmp_path / ".pdfqueue/demo"
    assert sorted(p.name for p in logs.glob("*.log")) == ["api.log", "worker-1.log"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("stop", "when"),
    [(signal.SIGINT, "worker-2.log"), (signal.SIGTERM, "uploading")],
    ids=["ctrl-c-while-starting-its-children", "sigterm-while-the-batch-runs"],
)
def test_a_stop_during_start_up_leaves_no_process_behind(
    stop: signal.Signals, when: str, settings: Settings, tmp_path: Path
) -> None:
    """A signal while the demo started its children (before its try block) left the ones
    started so far running for good; this one comes as the last worker's log is created."""
    argv = [*DEMO, "--files", "20", "--workers", "2", "--port", str(free_port())]
    with demo(argv, tmp_path, demo_env(settings)) as proc:
        if when.endswith(".log"):
            read_until(proc, "users in table")  # then it starts its children at once
            log = tmp_path / ".pdfqueue/demo" / when
            wait_until(log.exists, f"{log} created", 60, interval_s=0.001)
        else:
            read_until(proc, when)
        os.killpg(proc.pid, stop)
        # 130: interrupted before its batch ended; 20 PDFs may also be done before the signal
        assert proc.wait(60) in ({130} if when.endswith(".log") else {0, 130})
        wait_until(lambda: not running_in(tmp_path), "the demo's processes gone", 15)


@pytest.mark.timeout(300)
def test_a_killed_demo_takes_its_children_along(settings: Settings, tmp_path: Path) -> None:
    """Its children run in sessions of their own: SIGKILLed, the demo used to leave them
    running (in CI, 40 minutes later, holding their ports)."""
    argv = [*DEMO, "--files", "20", "--workers", "1", "--port", str(free_port())]
    with demo(argv, tmp_path, demo_env(settings)) as proc:
        read_until(proc, SERVING)
        proc.kill()
        proc.wait()
        wait_until(lambda: not running_in(tmp_path), "the demo's children gone", 15)


@pytest.mark.timeout(300)
def test_each_worker_serves_metrics_on_a_port_of_its_own(
    settings: Settings, tmp_path: Path
) -> None:
    """Both workers took PDFQUEUE_METRICS_PORT's default, 9100: with it taken, neither served."""
    argv = [*DEMO, "--files", "20", "--workers", "2", "--port", str(free_port())]
    with port_taken(9100), demo(argv, tmp_path, demo_env(settings)) as proc:
        seen = read_until(proc, SERVING)
        ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)/metrics \(worker-\d\)", seen)]
        assert len(set(ports)) == 2, seen
        assert 9100 not in ports
        for port in ports:
            answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            assert answer.status_code == 200
            assert "pdfqueue_worker_max_jobs" in answer.text
        stopped_with(proc, signal.SIGINT, tmp_path)


def tour_blocks(readme: str) -> list[str]:
    """The ```sh blocks the tour marker comes before, each checked to follow it at once."""
    lines = readme.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != TOUR_MARKER:
            continue
        assert lines[i + 1].strip() == "```sh", f"README.md:{i + 2}: the tour marker's block"
        end = lines.index("```", i + 2)
        blocks.append("\n".join(lines[i + 2 : end]) + "\n")
    assert blocks, f"README.md has no block after {TOUR_MARKER!r}: the tour went missing"
    return blocks


@pytest.mark.timeout(600)
def test_the_readme_tour_runs_verbatim_in_a_fresh_shell(settings: Settings) -> None:
    """The tour's first command failed in a fresh shell (uv was on make's PATH only), and it
    needed a token pasted by hand. It runs from the checkout (`uv run` finds the project from
    there): in a scratch folder inside it, so that a developer's own demo is left alone."""
    scratch = ROOT / ".pdfqueue/tests" / f"tour-{uuid.uuid4().hex[:8]}"
    scratch.mkdir(parents=True)
    env = demo_env(settings)
    argv = [env["UV"], "run", "pdfqueue", "demo", "--workers", "2", "--port", str(free_port())]
    try:
        with demo(argv, scratch, env) as proc:  # as `make demo` runs it: uv, then the demo
            read_until(proc, SERVING)
            env_file = (scratch / ".pdfqueue/demo/env").read_text()
            answers = [run_in_fresh_shell(block, scratch) for block in tour_blocks(README)]
            check_tour(answers, env_file)
            stopped_with(proc, signal.SIGINT, scratch)  # Ctrl-C, to uv and the demo at once
        assert not (scratch / ".pdfqueue/demo/env").exists()  # its token died with its API
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_in_fresh_shell(block: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`block` as a user pastes it into a new terminal: no errexit, only HOME and the default
    PATH; each command that fails is reported on stderr as `tour: exit N: COMMAND`."""
    script = cwd / "tour.sh"
    script.write_text("trap 'echo \"tour: exit $?: $BASH_COMMAND\" >&2' ERR\n" + block)
    fresh = {"HOME": os.environ["HOME"], "PATH": FRESH_PATH}
    return subprocess.run(
        ["/bin/bash", "--noprofile", "--norc", str(script)],
        cwd=cwd,
        env=fresh,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def check_tour(answers: list[subprocess.CompletedProcess[str]], env_file: str) -> None:
    """Every command ran; what failed is an upload of the demo's broken résumés (exit 3)."""
    for answer in answers:
        report = f"stdout:\n{answer.stdout}\nstderr:\n{answer.stderr}"
        failed = re.findall(r"^tour: exit (\d+): (.*)$", answer.stderr, re.MULTILINE)
        assert all(code == str(EXIT_FILES_FAILED) and "upload" in c for code, c in failed), report
        assert answer.returncode == 0, report
    values = dict(
        re.findall(r"^export (PDFQUEUE_URL|PDFQUEUE_TOKEN|DEMO_BATCH)=(\S+)$", env_file, re.M)
    )
    headers = {"Authorization": f"Bearer {values['PDFQUEUE_TOKEN']}"}
    with httpx.Client(base_url=values["PDFQUEUE_URL"], headers=headers, timeout=30) as api:
        newest = [b["batch_id"] for b in api.get("/v1/batches").json()["batches"]]
        curl_batch, again, first = newest[:3]
        assert first == values["DEMO_BATCH"]
        assert f'"batch_id":"{curl_batch}"' in answers[-1].stdout.replace(" ", "")
        first_status = api.get(f"/v1/batches/{first}").json()
        again_status = api.get(f"/v1/batches/{again}").json()
    # what the README says: the second upload links nothing, the linked ones already exist
    assert first_status["linked"] > 0
    assert again_status["linked"] == 0
    assert again_status["skipped_already_exists"] >= first_status["linked"]
    listing = "".join(a.stdout for a in answers)
    assert f"batch {first}: {first_status['failed']} files" in listing


@pytest.mark.timeout(300)
def test_make_demo_stop_stops_the_demo_services(tmp_path: Path) -> None:
    """Nothing said how to stop the demo's Redis and PostgreSQL; `make demo-stop` does."""
    redis_port, pg_port = free_ports(2)
    ports = f"PDFQUEUE_REDIS_PORT={redis_port} PDFQUEUE_PG_PORT={pg_port}"
    services_env = {
        **os.environ,
        "PDFQUEUE_REDIS_PORT": str(redis_port),
        "PDFQUEUE_PG_PORT": str(pg_port),
    }
    state = tmp_path / "services"
    start = ["bash", "tools/services.sh", "start", str(state), "--no-s3"]
    subprocess.run(start, cwd=ROOT, env=services_env, check=True, capture_output=True)
    try:
        assert listening(redis_port)
        assert listening(pg_port)
        stop = ["make", "--no-print-directory", "demo-stop", f"DEMO_STATE={state}"]
        subprocess.run([*stop, f"DEMO_PORTS={ports}"], cwd=ROOT, check=True)
        assert not listening(redis_port)
        assert not listening(pg_port)
    finally:
        stop_anyway = ["bash", "tools/services.sh", "stop", str(state)]
        subprocess.run(stop_anyway, cwd=ROOT, env=services_env, check=False)
    assert "make demo-stop" in README
