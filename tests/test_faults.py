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

import pytest

from pdfqueue.domain.errors import is_transient
from pdfqueue_dev.corpora.samples import Expect
from tests.support import faults
from tests.support.faults import (
    Run,
    Services,
    check_invariants,
    outage,
)

fault_services = faults.fault_services  # the fixtures, by name
run_factory = faults.run_factory
pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]
RUNS = int(os.environ.get("PDFQUEUE_FAULT_RUNS", "3"))


def done(s: dict[str, object]) -> bool:
    return s.get("status") == "COMPLETED"


def started(s: dict[str, object]) -> bool:
    return int(s.get("processed") or 0) >= 3 or done(s)


@pytest.mark.parametrize("attempt", range(RUNS))
async def test_kill9_of_a_worker_at_a_random_point(run_factory, attempt: int) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(40, seed=100 + attempt)
    victim = run.start_worker()
    run.start_worker()
    await asyncio.sleep(random.uniform(0.5, 4.0))  # anywhere: ingest, parsing, claiming
    victim.kill9()  # the worker and its parsing processes at once, as an OOM kill
    run.start_worker()  # the replacement pod
    await run.wait_until("completed", done, timeout_s=150)
    await check_invariants(run)


async def test_sigterm_mid_batch_finishes_running_work_and_exits_cleanly(run_factory) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(150, seed=200)
    run.env["PDFQUEUE_WORKER_MAX_JOBS"] = "2"  # slow enough that work is left at SIGTERM
    worker = run.start_worker()
    await run.wait_until("started", started, timeout_s=60)
    worker.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(worker.proc.wait, 30)
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
    assert all(w.alive() for w in run.workers)  # the workers waited and reconnected
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


@pytest.mark.parametrize("attempt", range(max(1, RUNS - 1)))
async def test_retry_after_storage_came_back_with_a_worker_killed_mid_round(
    run_factory, fault_services: Services, attempt: int
) -> None:  # type: ignore[no-untyped-def]
    run: Run = await run_factory(40, seed=700 + attempt)
    run.env["PDFQUEUE_MAX_TRIES"] = "3"  # the outage outlasts them: files fail for it
    await ingest_only(run)  # with S3 up; a quiet machine would process them all meanwhile
    await asyncio.to_thread(fault_services.run, "stop", "--only", "s3")
    try:
        run.start_worker()
        run.start_worker()
        first = await run.wait_until("completed with S3 down", done, timeout_s=150)
    finally:
        await asyncio.to_thread(fault_services.run, "start", "--only", "s3")
    assert first["failed"] > sum(f.expect is Expect.FAILED for f in run.corpus.files)
    run.stop_all()  # idle now; the round runs with the usual tries, as after a deploy
    del run.env["PDFQUEUE_MAX_TRIES"]
    # Fresh workers start their parsing processes cold: on a loaded machine, FAST's 2.5 s
    # parse budget can pass before the first PDF is read, try after try.
    run.env |= {"PDFQUEUE_JOB_TIMEOUT_S": "15", "PDFQUEUE_JOB_COMPLETION_WAIT_S": "21"}
    victim = run.start_worker()
    run.start_worker()
    await start_round(run)
    await asyncio.sleep(random.uniform(0.1, 2.0))  # anywhere: fan-out, parsing, claiming
    victim.kill9()
    run.start_worker()
    await run.wait_until(
        "completed again", lambda s: done(s) and s.get("retries") == 1, timeout_s=150
    )
    await check_invariants(run)  # every file its expected outcome, counted once
    retried = await retried_files(run)
    assert retried
    # the outage shows as `storage_unavailable`, or `timeout` when a read hung until the
    # job's deadline: either is transient, and nothing else was retried
    assert all(is_transient(why) for why in retried.values()), retried


async def ingest_only(run: Run) -> None:
    """Run the batch's ingest job alone (a burst worker that takes one job), then stop."""
    from pdfqueue_worker.app import build_worker

    worker = build_worker(run.settings, burst=True, handle_signals=False, max_burst_jobs=1)
    try:
        await worker.main()
    finally:
        await worker.close()
    await run.wait_until("listed", lambda s: s.get("total_files") is not None, timeout_s=60)


async def start_round(run: Run) -> None:
    from redis.asyncio import Redis

    from pdfqueue.runtime.connections import lifecycle_over
    from pdfqueue.stores.postgres.pool import connect

    s = run.settings
    pool = await connect(s.database_url, max_size=2)
    redis = Redis.from_url(s.redis_url)
    try:
        lifecycle = lifecycle_over(pool, redis, s)
        await lifecycle.requeue(run.batch_id, all_failed=False)
    finally:
        await redis.aclose()
        await pool.close()


async def retried_files(run: Run) -> dict[int, str]:
    import asyncpg

    conn = await asyncpg.connect(run.settings.database_url)
    try:
        rows = await conn.fetch(
            "SELECT idx, previous_reason FROM pdfqueue_files WHERE batch_id = $1 AND tries = 2",
            run.batch_id,
        )
    finally:
        await conn.close()
    return {r["idx"]: r["previous_reason"] for r in rows}
