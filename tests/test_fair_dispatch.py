"""Fair dispatch on real Redis and real workers: small batches and light tenants are not starved."""

from __future__ import annotations

import asyncio
import uuid
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from arq.constants import in_progress_key_prefix, job_key_prefix
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.redis.fair_dispatch import Dispatcher, drop_pending, pending_jobs
from pdfqueue.stores.redis.queue import Job
from pdfqueue_dev.corpora.samples import Mix, build_corpus, render_pdf, seed_users
from pdfqueue_dev.processes import wait_until_async
from tests.support.helpers import GLOBEX, RunWorker, upload

BIG = 10_000
"""PDFs of the big batch: the small one must not wait for it, only for a few of its jobs
(1,184 of its PDFs at most so far, in a CI run on a loaded host with jobs of 32)."""
NO_EMAIL = Mix(known=0, no_email=1.0, unknown_email=0, already_linked=0, corrupt=0, encrypted=0)


@pytest.fixture(autouse=True)
async def users_table(db: asyncpg.Connection, settings: Settings) -> None:
    """An empty users table: these PDFs carry no address, so none is ever looked up."""
    await seed_users(db, [], table=settings.users_table)


def copies_zip(path: Path, n: int) -> Path:
    """A ZIP of `n` PDFs, copies of three small ones without an address: cheap to build and read."""
    corpus = build_corpus(3, seed=7, mix=NO_EMAIL, extra_users=0)
    pdfs = [render_pdf(f, seed=7) for f in corpus.files]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for i in range(n):
            zf.writestr(f"pdfs/{i:05d}.pdf", pdfs[i % len(pdfs)])
    return path


async def summary(api: httpx.AsyncClient, batch_id: str, **kw: Any) -> dict[str, Any]:
    response = await api.get(f"/v1/batches/{batch_id}", **kw)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 300) -> None:
    await wait_until_async(check, what, timeout_s, interval_s=0.02)


async def finish(api: httpx.AsyncClient, worker: asyncio.Task[Any], *big: str) -> None:
    """Cancel the big batches (their pending work is dropped) and let the burst worker end."""
    for batch_id in big:
        assert (await api.delete(f"/v1/batches/{batch_id}")).status_code == 200
    await asyncio.wait_for(worker, 120)


async def small_beats_big(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    redis: Redis,
    settings: Settings,
    small_headers: dict[str, str],
) -> None:
    big = await upload(api, copies_zip(tmp_path / "big.zip", BIG))
    worker = asyncio.create_task(run_worker())

    async def big_under_way() -> bool:
        return (await summary(api, big))["processed"] > 0

    await until(big_under_way, "the big batch runs")
    # The big batch's work waits as pending work, not in arq's queue.
    assert await pending_jobs(redis, settings.queue_name) > 100
    small_zip = copies_zip(tmp_path / "small.zip", 10).read_bytes()
    response = await api.post(
        "/v1/batches",
        content=small_zip,
        headers={"Content-Type": "application/zip", **small_headers},
    )
    assert response.status_code == 202, response.text
    small = response.json()["batch_id"]

    async def small_done() -> bool:
        return (await summary(api, small, headers=small_headers))["status"] == "COMPLETED"

    await until(small_done, "the small batch completes")
    big_then = await summary(api, big)
    small_final = await summary(api, small, headers=small_headers)
    assert (small_final["processed"], small_final["skipped_no_match"]) == (10, 10)
    assert big_then["status"] == "PROCESSING"
    assert big_then["processed"] < 0.2 * BIG, big_then
    await finish(api, worker, big)
    assert await pending_jobs(redis, settings.queue_name) == 0


async def test_another_tenants_small_batch_completes_while_a_big_one_is_under_20_percent(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    await small_beats_big(api, run_worker, tmp_path, redis, settings, GLOBEX)


async def test_a_tenants_own_small_batch_completes_while_its_big_one_is_under_20_percent(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path, redis: Redis, settings: Settings
) -> None:
    await small_beats_big(api, run_worker, tmp_path, redis, settings, {})


@pytest.mark.settings(dispatch_tenant_weights={"acme": 2}, pdfs_per_job=8)
async def test_weights_2_to_1_get_service_within_10_percent_of_2_to_1(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path
) -> None:
    acme = await upload(api, copies_zip(tmp_path / "acme.zip", 2000))
    globex_zip = copies_zip(tmp_path / "globex.zip", 2000).read_bytes()
    response = await api.post(
        "/v1/batches", content=globex_zip, headers={"Content-Type": "application/zip", **GLOBEX}
    )
    globex = response.json()["batch_id"]
    worker = asyncio.create_task(run_worker())
    seen: dict[str, int] = {}

    def served(total: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            seen["acme"] = (await summary(api, acme))["processed"]
            seen["globex"] = (await summary(api, globex, headers=GLOBEX))["processed"]
            return seen["acme"] + seen["globex"] >= total

        return check

    # The window starts once both are under way: acme's ingest may run first and fill the
    # first window alone.
    await until(served(300), "300 PDFs served")
    start = dict(seen)
    await until(served(1500), "1,500 PDFs served")
    assert seen["acme"] < 2000, seen  # both still had a backlog over the whole window
    acme_share, globex_share = (seen[t] - start[t] for t in ("acme", "globex"))
    assert 1.8 <= acme_share / globex_share <= 2.2, (start, seen)
    await api.delete(f"/v1/batches/{globex}", headers=GLOBEX)
    await finish(api, worker, acme)


def _jobs(batch_id: str, n: int) -> list[Job]:
    return [
        Job(keys.process_job(batch_id, i), "process", {"batch_id": batch_id}, cost=2)
        for i in range(n)
    ]


async def test_registering_twice_adds_nothing_and_each_job_is_released_once(
    redis: Redis, settings: Settings
) -> None:
    dispatcher = Dispatcher(redis, settings.queue_name, window=3, window_floor=3)
    batch_id = uuid.uuid4().hex
    await redis.hset(keys.batch(batch_id), mapping={"status": "PROCESSING", "tenant": "acme"})
    assert await dispatcher.register(batch_id, "acme", _jobs(batch_id, 10), chunk=4) == 10
    assert await dispatcher.register(batch_id, "acme", _jobs(batch_id, 10), chunk=4) == 0
    assert await pending_jobs(redis, settings.queue_name) == 10

    released: list[str] = []
    while await pending_jobs(redis, settings.queue_name) or await redis.zcard(settings.queue_name):
        assert await dispatcher.dispatch() <= 3
        queued = sorted(m.decode() for m in await redis.zrange(settings.queue_name, 0, -1))
        assert len(queued) <= 3  # the window holds
        fresh = [j for j in queued if j not in released]
        released += fresh
        # the oldest job finishes as arq would end it: out of the queue, job key gone
        await redis.zrem(settings.queue_name, queued[0])
        await redis.delete(job_key_prefix + queued[0])
    assert sorted(released) == sorted(keys.process_job(batch_id, i) for i in range(10))
    assert await dispatcher.dispatch() == 0


async def test_a_job_lost_with_its_worker_keeps_its_slot_until_arq_ends_it(
    redis: Redis, settings: Settings
) -> None:
    dispatcher = Dispatcher(redis, settings.queue_name, window=2, window_floor=2)
    batch_id = uuid.uuid4().hex
    await redis.hset(keys.batch(batch_id), mapping={"status": "PROCESSING", "tenant": "acme"})
    await dispatcher.register(batch_id, "acme", _jobs(batch_id, 5), chunk=100)
    assert await dispatcher.dispatch() == 2
    first, second = (m.decode() for m in await redis.zrange(settings.queue_name, 0, -1))
    # A worker took `first` and was killed: its in-progress key stays, the job stays queued.
    await redis.set(in_progress_key_prefix + first, b"1", px=60_000)
    assert await dispatcher.dispatch() == 0  # nothing extra released for the lost job
    assert await redis.zcard(settings.queue_name) == 2
    await redis.zrem(settings.queue_name, second)  # `second` finished normally
    assert await dispatcher.dispatch() == 1
    assert await dispatcher.dispatch(finishing=first) == 1  # the rerun of `first` ends now
    assert await redis.zcard(settings.queue_name) == 3  # `first` is still there until arq ends it
    assert await pending_jobs(redis, settings.queue_name) == 1


async def test_cancel_drops_pending_work_and_a_cancelled_batch_registers_nothing(
    redis: Redis, settings: Settings
) -> None:
    dispatcher = Dispatcher(redis, settings.queue_name, window=1, window_floor=1)
    batch_id = uuid.uuid4().hex
    await redis.hset(keys.batch(batch_id), mapping={"status": "PROCESSING", "tenant": "acme"})
    await dispatcher.register(batch_id, "acme", _jobs(batch_id, 6), chunk=100)
    assert await dispatcher.dispatch() == 1
    assert await drop_pending(redis, settings.queue_name, batch_id) == 5
    assert await pending_jobs(redis, settings.queue_name) == 0
    late = uuid.uuid4().hex  # cancelled before its ingest registered anything
    await redis.hset(keys.batch(late), mapping={"status": "CANCELLED", "tenant": "acme"})
    assert await dispatcher.register(late, "acme", _jobs(late, 3), chunk=100) == 0
    await redis.zrem(settings.queue_name, keys.process_job(batch_id, 0))
    assert await dispatcher.dispatch() == 0
    assert await redis.zcard(settings.queue_name) == 0


async def test_a_retry_waiting_out_its_backoff_holds_no_slot(
    redis: Redis, settings: Settings
) -> None:
    dispatcher = Dispatcher(redis, settings.queue_name, window=1, window_floor=1)
    batch_id = uuid.uuid4().hex
    await redis.hset(keys.batch(batch_id), mapping={"status": "PROCESSING", "tenant": "acme"})
    await dispatcher.register(batch_id, "acme", _jobs(batch_id, 3), chunk=100)
    assert await dispatcher.dispatch() == 1
    first = keys.process_job(batch_id, 0)
    await redis.zincrby(settings.queue_name, 60_000, first)  # arq's retry: re-scored a minute on
    assert await dispatcher.dispatch() == 1  # its slot serves another job meanwhile
    assert await redis.zscore(settings.queue_name, first) is not None  # and it stays queued
