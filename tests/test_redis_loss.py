"""Redis loses every byte mid-batch: PostgreSQL and the ZIP rebuild it, and each batch ends exactly.

Real worker processes on private services (`tests.support.faults`): Redis is SIGKILLed, its AOF
and RDB deleted, and it comes back empty. Nothing but the workers (their start, their check
for a lost Redis) rebuilds the batches.
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.models import Claim, FileRef, Outcome
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.recovery import reconcile_batch, reconcile_if_reset, reconcile_running
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.redis.queue import queued_with_prefix, remove
from pdfqueue_dev.processes import wait_until_async
from tests.support import faults
from tests.support.faults import (
    Run,
    Services,
    check_invariants,
    lose_redis,
)
from tests.support.helpers import ACME, ACME_TOKEN

fault_services = faults.fault_services  # the fixtures, by name
run_factory = faults.run_factory
pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]
SLOW = {"PDFQUEUE_WORKER_MAX_JOBS": "2"}
"""Slow enough that Redis is lost mid-batch."""


def done(s: dict[str, object]) -> bool:
    return s.get("status") == "COMPLETED"


def started(s: dict[str, object]) -> bool:
    return int(s.get("processed") or 0) >= 5 or done(s)


@asynccontextmanager
async def stores(run: Run) -> AsyncIterator[Lifecycle]:
    s = run.settings
    pool = await connect(s.database_url, max_size=2)
    redis = Redis.from_url(s.redis_url)
    try:
        yield lifecycle_over(pool, redis, s)
    finally:
        await redis.aclose()
        await pool.close()


@asynccontextmanager
async def api_client(run: Run) -> AsyncIterator[httpx.AsyncClient]:
    from pdfqueue_api.app import create_app

    app = create_app(run.settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://pdfqueue.test", headers=ACME, timeout=30
        ) as http:
            yield http


async def hold_once_started(runs: list[Run], timeout_s: float = 90) -> None:
    """SIGSTOP every worker the moment every batch has started, so that Redis is lost in the
    middle of each: the workers share one queue, so any of them can finish any batch, and
    stopping one run's workers while waiting for another would not hold it."""
    seen: list[dict[str, object]] = []

    async def all_started() -> list[dict[str, object]] | None:
        seen[:] = [await run.summary() for run in runs]
        return list(seen) if all(started(s) for s in seen) else None

    await wait_until_async(
        all_started,
        "every batch started",
        timeout_s,
        interval_s=0.05,
        diagnostics=lambda: f"their summaries: {seen}",
    )
    for run in runs:
        for worker in run.workers:
            worker.signal(signal.SIGSTOP)
    summaries = [await run.summary() for run in runs]
    assert not any(done(s) for s in summaries), f"a batch ended before the loss: {summaries}"


async def upload(http: httpx.AsyncClient, run: Run) -> httpx.Response:
    body = run.zip_path.read_bytes()
    return await http.post("/v1/batches", files={"file": ("cvs.zip", body, "application/zip")})


async def test_redis_lost_mid_batch_both_batches_complete_exactly(
    run_factory: Any, fault_services: Services
) -> None:
    api_env = {
        "PDFQUEUE_API_TOKENS": f"acme:{ACME_TOKEN}",
        "PDFQUEUE_QUOTA_CONCURRENT_BATCHES": "1",
    }
    by_api: Run = await run_factory(80, seed=900, register=False)
    # jobs of 4 PDFs, one at a time per batch: progress in small steps, so that the batches
    # are seen started long before done
    slower = SLOW | {"PDFQUEUE_PDFS_PER_JOB": "4", "PDFQUEUE_DISPATCH_BATCH_WINDOW_JOBS": "1"}
    by_api.env |= slower | api_env
    uid = str(uuid.uuid4())
    by_operator: Run = await run_factory(80, seed=901, tenant="ops", pdfbatch_uid=uid)
    by_operator.env |= slower
    async with api_client(by_api) as http:
        accepted = await upload(http, by_api)
        assert accepted.status_code == 202, accepted.text
        by_api.batch_id = accepted.json()["batch_id"]
        for run in (by_api, by_operator):
            run.start_worker()
        await hold_once_started([by_api, by_operator])
        refused = await upload(http, by_api)  # the running batch holds acme's one slot
        assert refused.status_code == 429, refused.text

        async with Redis.from_url(by_api.settings.redis_url) as redis:
            await redis.set("test:before-the-loss", 1)
        await lose_redis(fault_services)
        back = time.monotonic()
        # Came back empty. Not `dbsize() == 0`: the workers write their heartbeats, epoch and
        # delivery bookkeeping again the moment Redis answers.
        async with Redis.from_url(by_api.settings.redis_url) as redis:
            assert not await redis.exists("test:before-the-loss")
        mid = {r.batch_id: (await r.summary())["processed"] for r in (by_api, by_operator)}
        for run in (by_api, by_operator):
            for worker in run.workers:
                worker.signal(signal.SIGCONT)

        await by_api.wait_until("completed", done, timeout_s=150)
        await by_operator.wait_until("completed", done, timeout_s=150)
        took = time.monotonic() - back
        print(f"\nRedis back empty -> both batches COMPLETED in {took:.1f} s")
        assert took < 150  # the target is 60 s; this only catches a batch left to its TTL
        for run in (by_api, by_operator):
            assert (await run.summary())["total_files"] > mid[run.batch_id]  # lost mid-batch
            await check_invariants(run)  # exact counts, each user linked once, no stray PDF
        async with stores(by_api) as lifecycle:
            assert await lifecycle.batches.active_count("acme") == 0  # the quota slot is free
            assert await lifecycle.batches.pdfbatch_uid(by_operator.batch_id) == uid
        again = await upload(http, by_api)
        assert again.status_code == 202, again.text
    logs = "".join(w.log_path.read_text(errors="replace") for w in by_api.workers)
    assert "batch rebuilt from PostgreSQL" in logs
    await claim_again_links_nobody_twice(by_api)


async def claim_again_links_nobody_twice(run: Run) -> None:
    """What a file processed twice would do (a job of the lost Redis still running beside its
    rebuilt copy): the claim links a user only while their pdf_url is NULL."""
    async with stores(run) as lifecycle:
        files = lifecycle.files
        linked = [f for f in await files.read(run.batch_id) if f.outcome == "linked"]
        assert linked
        users = dict(
            await files.pool.fetch(
                f'SELECT id, pdf_url FROM "{run.settings.users_table}" WHERE id = ANY($1)',
                [f.user_id for f in linked],
            )
        )
        new_index = 10_000  # the same user claimed from a file the batch never had
        claims = [
            Claim(FileRef(run.batch_id, f.index, f.name), f.user_id, f"pdfs/x/{f.index}", "00")
            for f in linked
        ] + [Claim(FileRef(run.batch_id, new_index, "again.pdf"), linked[0].user_id, "k", "00")]
        decided = await files.claim(claims)
        assert all(d.outcome is Outcome.LINKED for r, d in decided.items() if r.index < new_index)
        assert decided[claims[-1].ref].outcome is Outcome.SKIPPED_ALREADY_EXISTS
        after = dict(
            await files.pool.fetch(
                f'SELECT id, pdf_url FROM "{run.settings.users_table}" WHERE id = ANY($1)',
                list(users),
            )
        )
        assert after == users  # no second link, no link replaced


async def test_reconcile_during_a_healthy_batch_changes_nothing(run_factory: Any) -> None:
    run: Run = await run_factory(60, seed=910)
    run.env |= SLOW
    run.start_worker()
    run.start_worker()
    rounds = 0
    async with stores(run) as lifecycle:
        while not done(await run.summary()):
            report = await reconcile_running(lifecycle, grace_s=0)
            assert report.checked >= 1 or done(await run.summary())
            assert report.rebuilt == [], report
            assert report.failed == []
            rounds += 1
            await asyncio.sleep(0.05)
    assert rounds > 5  # it ran while the batch was in flight, ingest and processing
    await check_invariants(run)


async def test_jobs_lost_any_other_way_are_queued_again(run_factory: Any) -> None:
    """Every queued job of a running batch deleted by hand (live state kept): the same path
    re-lists the ZIP and queues the files without an outcome, under their usual ids."""
    run: Run = await run_factory(60, seed=920)
    run.env |= {**SLOW, "PDFQUEUE_DISPATCH_FAIR": "false"}  # every job in arq's queue at once
    from tests.test_faults import ingest_only

    await ingest_only(run)
    s = run.settings
    async with stores(run) as lifecycle:
        ids = await queued_with_prefix(
            lifecycle.redis, s.queue_name, keys.process_job_prefix(run.batch_id)
        )
        assert len(ids) >= 10
        assert await remove(lifecycle.redis, s.queue_name, ids) == len(ids)
        report = await reconcile_running(lifecycle, grace_s=0)
        assert [r.what for r in report.rebuilt] == [("jobs",)]
        again = await reconcile_batch(lifecycle, run.batch_id)  # the recover job is queued
        assert again is not None
        assert again.what == ()
    run.start_worker()
    await run.wait_until("completed", done, timeout_s=150)
    await check_invariants(run)
    async with stores(run) as lifecycle:
        left = await queued_with_prefix(lifecycle.redis, s.queue_name, "process:")
        assert left == []
        # the recovered jobs went in under ingest's ids: their results are there
        for job_id in ids:
            assert await lifecycle.redis.exists(f"arq:result:{job_id}")


async def test_a_worker_that_never_restarted_notices_redis_lost_its_data(run_factory: Any) -> None:
    """Redis came back empty under a worker that reconnected at once (its start hook never
    ran again): the epoch key is gone, and the first check to see it rebuilds."""
    from tests.test_faults import ingest_only

    run: Run = await run_factory(20, seed=930)
    await ingest_only(run)
    async with stores(run) as lifecycle:
        await lifecycle.redis.set(keys.redis_epoch(lifecycle.queue_name), "1")
        assert await reconcile_if_reset(lifecycle) is None  # Redis kept its data
        await lifecycle.redis.flushall()
        report = await reconcile_if_reset(lifecycle)
        assert report is not None
        assert [r.what for r in report.rebuilt] == [("state", "jobs")]
        assert await reconcile_if_reset(lifecycle) is None  # once per loss
    run.start_worker()
    await run.wait_until("completed", done, timeout_s=150)
    await check_invariants(run)
