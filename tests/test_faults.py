"""Fault injection with real processes, real signals and real servers: nothing lost, nothing twice.

Each scenario runs a batch on private services (so stopping them disturbs no other test),
injects its fault, lets the batch finish, then checks the invariants in `faults.check_invariants`.
`PDFQUEUE_FAULT_RUNS` sets how many randomized kill -9 runs to make (default 3).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from faults import Run, Services, check_invariants, outage, prepare

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]
RUNS = int(os.environ.get("PDFQUEUE_FAULT_RUNS", "3"))


def done(s: dict[str, object]) -> bool:
    return s.get("status") == "COMPLETED"


def started(s: dict[str, object]) -> bool:
    return int(s.get("processed") or 0) >= 3 or done(s)


@pytest.fixture(scope="module")
def fault_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    svc = Services.allocate(tmp_path_factory.mktemp("fault-services"))
    svc.run("start")
    # `start` accepts anything already answering on a port; these must be ours to stop.
    assert (svc.state / "redis.pid").exists(), f"another Redis holds port {svc.ports}"
    assert (svc.state / "versitygw.pid").exists(), f"another S3 server holds port {svc.ports}"
    yield svc
    svc.run("stop")


@pytest.fixture
async def run_factory(
    fault_services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[object]:
    from pdfqueue.stores.db import connect, migrate

    env = fault_services.env()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])  # boto3 in this process reads them from here
    pool = await connect(env["PDFQUEUE_DATABASE_URL"], max_size=1)
    async with pool.acquire() as conn:
        await migrate(conn)
    await pool.close()
    runs: list[Run] = []

    async def make(n: int, seed: int) -> Run:
        run = await prepare(env, n, seed, tmp_path)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop_all()


@pytest.mark.parametrize("attempt", range(RUNS))
async def test_kill9_of_a_worker_at_a_random_point(run_factory, attempt: int) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(40, seed=100 + attempt)
    victim = run.start_worker()
    run.start_worker()
    await asyncio.sleep(random.uniform(0.5, 4.0))  # anywhere: ingest, parsing, claiming
    run.kill9(victim)
    run.start_worker()  # the replacement pod
    await run.wait_until("completed", done, timeout_s=150)
    await check_invariants(run)


async def test_sigterm_mid_batch_finishes_running_work_and_exits_cleanly(run_factory) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(150, seed=200)
    run.env["PDFQUEUE_WORKER_MAX_JOBS"] = "2"  # slow enough that work is left at SIGTERM
    worker = run.start_worker()
    await run.wait_until("started", started, timeout_s=60)
    worker.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(worker.wait, 30)
    assert code == 0
    summary = await run.summary()
    assert summary["status"] == "PROCESSING"  # work was left for someone else
    run.start_worker()
    await run.wait_until("completed", done, timeout_s=120)
    await check_invariants(run)


@pytest.mark.parametrize("how", ["restart", "kill9"])
async def test_redis_restarted_mid_batch(run_factory, fault_services: Services, how: str) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(60, seed=300 + len(how))
    run.start_worker()
    run.start_worker()
    await run.wait_until("started", started, timeout_s=60)
    if how == "kill9":  # AOF with appendfsync everysec: at most a second of writes is at risk
        pid = int((fault_services.state / "redis.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(2)
        await asyncio.to_thread(fault_services.run, "start", "--only", "redis")
    else:
        await outage(fault_services, "redis", 3)
    await run.wait_until("completed", done, timeout_s=150)
    assert all(w.poll() is None for w in run.workers)  # the workers waited and reconnected
    await check_invariants(run)


@pytest.mark.parametrize("service", ["postgres", "s3"])
async def test_dependency_down_for_ten_seconds(
    run_factory, fault_services: Services, service: str
) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(60, seed=400 + len(service))
    run.start_worker()
    run.start_worker()
    await run.wait_until("started", started, timeout_s=60)
    await outage(fault_services, service, 10)
    await run.wait_until("completed", done, timeout_s=150)
    await check_invariants(run)  # retries outlasted the outage: no file failed for it
