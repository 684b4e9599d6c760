"""Once-only guarantees: idempotent enqueue, duplicate delivery, TTL expiry, cancel, fail fast."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from arq.constants import job_key_prefix
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.models import Outcome
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.redis.queue import Job, enqueue
from pdfqueue.stores.redis.state import BatchState, Recorded, Recording, utcnow
from pdfqueue_dev.corpora.samples import CLEAN
from tests.support.helpers import ACME, MakeCorpus, RunWorker, upload


async def status(api: httpx.AsyncClient, batch_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/batches/{batch_id}")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_enqueue_is_idempotent_by_job_id(redis: Redis, settings: Settings) -> None:
    tag = settings.queue_name  # unique per test
    jobs = [Job(f"{tag}:{i}", "process", {"i": i}) for i in range(3)]
    assert await enqueue(redis, settings.queue_name, jobs) == 3
    assert await enqueue(redis, settings.queue_name, [*jobs, Job(f"{tag}:3", "process", {})]) == 1
    assert await redis.zcard(settings.queue_name) == 4
    payload = await redis.get(job_key_prefix + f"{tag}:1")
    assert payload.startswith(b"{")  # JSON, never pickle


async def test_outcome_is_counted_once(redis: Redis, settings: Settings) -> None:
    state = BatchState(redis, 60)
    batch = uuid.uuid4().hex  # keys refuse anything but a batch id
    await state.create(batch, "t", utcnow())
    assert await state.start(batch, 2, 0) == "PROCESSING"
    assert await state.record(batch, [(0, Outcome.LINKED)]) == Recording(
        [Recorded.COUNTED], "PROCESSING"
    )
    assert await state.unrecorded(batch, [0, 1]) == [1]
    # one call, several files: the repeat is not counted, the last file completes the batch
    done = await state.record(batch, [(0, Outcome.FAILED), (1, Outcome.SKIPPED_NO_MATCH)])
    assert done == Recording([Recorded.DUPLICATE, Recorded.COMPLETED_BATCH], "COMPLETED")
    summary = (await state.read(batch)).summary  # type: ignore[union-attr]
    assert (summary.processed, summary.linked, summary.failed, summary.skipped_no_match) == (
        2,
        1,
        0,
        1,
    )
    assert (await state.record(uuid.uuid4().hex, [(0, Outcome.LINKED)])).codes == [Recorded.MISSING]


async def test_second_delivery_of_every_job_changes_nothing(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
    db: asyncpg.Connection,
) -> None:
    _, path = await make_corpus(20, seed=21)
    batch_id = await upload(api, path)
    await run_worker()
    before = await status(api, batch_id)
    links = await db.fetch(f'SELECT id, pdf_url FROM "{settings.users_table}" ORDER BY id')

    # Deliver every job again, as a crashed worker's leftovers or a duplicate enqueue would.
    await redis.delete(*[k async for k in redis.scan_iter("arq:result:*" + batch_id + "*")])
    replays = [
        Job(
            keys.ingest_job(batch_id),
            "ingest",
            {"batch_id": batch_id, "source": f"uploads/{batch_id}.zip"},
        )
    ]
    assert await enqueue(redis, settings.queue_name, replays) == 1
    await run_worker()
    assert await status(api, batch_id) == before
    assert await db.fetch(f'SELECT id, pdf_url FROM "{settings.users_table}" ORDER BY id') == links
    rows = await db.fetchval("SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1", batch_id)
    assert rows == 21  # 20 PDFs + notes.txt, each once


@pytest.mark.settings(batch_ttl_s=60, pdfs_per_job=16)
async def test_batch_that_outlives_its_live_state_still_completes(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, redis: Redis
) -> None:
    corpus, path = await make_corpus(30, seed=22)
    batch_id = await upload(api, path)
    await run_worker(max_burst_jobs=1)  # ingest: two process jobs, 16 + 14 PDFs
    await run_worker(max_burst_jobs=1)  # one of them
    midway = await status(api, batch_id)
    assert 0 < midway["processed"] < 30
    await redis.delete(keys.batch(batch_id), keys.outcomes(batch_id))  # the TTL ran out
    durable = await status(api, batch_id)  # served from PostgreSQL now
    assert durable["processed"] == midway["processed"]
    await run_worker()
    final = await status(api, batch_id)
    assert final["status"] == "COMPLETED"
    assert {k: final[k] for k in corpus.counts()} == corpus.counts()
    assert final["processed"] == 30


@pytest.mark.settings(pdfs_per_job=16)
async def test_cancel_drops_pending_work(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
) -> None:
    _, path = await make_corpus(25, seed=23, mix=CLEAN)
    batch_id = await upload(api, path)
    await run_worker(max_burst_jobs=1)  # ingest only: 2 process jobs (16 + 9 PDFs) are queued
    assert await redis.zcard(settings.queue_name) == 2
    response = await api.delete(f"/v1/batches/{batch_id}")
    assert response.status_code == 200
    assert response.json()["status"] == "CANCELLED"
    assert await redis.zcard(settings.queue_name) == 0
    await run_worker()
    final = await status(api, batch_id)
    assert (final["status"], final["processed"], final["linked"]) == ("CANCELLED", 0, 0)
    assert (await api.delete(f"/v1/batches/{batch_id}")).json()["status"] == "CANCELLED"


async def test_api_fails_fast_when_redis_is_down(
    settings: Settings, make_corpus: MakeCorpus, s3_keys: Any, db: asyncpg.Connection
) -> None:
    from pdfqueue_api.app import create_app

    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    _, path = await make_corpus(3, seed=24)
    app = create_app(down)
    since = await db.fetchval("SELECT now()")
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://t",
            headers=ACME,
        )
        started = time.monotonic()
        response = await client.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        assert time.monotonic() - started < 2.5  # a bound on hanging, not a performance claim
        assert response.status_code == 503
        assert "redis" in response.json()["detail"]
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["redis"].startswith("error")
        await client.aclose()
    assert s3_keys("uploads/") == []
    created = "SELECT count(*) FROM pdfqueue_batches WHERE created_at >= $1"
    assert await db.fetchval(created, since) == 0


async def test_two_workers_racing_on_the_same_pdf_link_it_once(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
    db: asyncpg.Connection,
) -> None:
    """Both deliveries of one job run at once (a stalled worker and its replacement)."""
    from arq.constants import job_key_prefix as jobs

    from pdfqueue.stores.redis.queue import deserialize
    from pdfqueue_worker.app import shutdown, startup
    from pdfqueue_worker.tasks.process import process

    _, path = await make_corpus(6, seed=25, mix=CLEAN)
    batch_id = await upload(api, path)
    await run_worker(max_burst_jobs=1)  # ingest only
    job_ids = sorted(m.decode() for m in await redis.zrange(settings.queue_name, 0, -1))
    payloads = [deserialize(await redis.get(jobs + j)) for j in job_ids]

    ctx_a: dict[str, Any] = {"settings": settings, "redis": redis}
    ctx_b: dict[str, Any] = {"settings": settings, "redis": redis}
    await startup(ctx_a)
    await startup(ctx_b)
    try:
        for job_id, payload in zip(job_ids, payloads, strict=True):
            race = [
                process({**ctx, "job_id": job_id, "job_try": 1}, **payload["k"])
                for ctx in (ctx_a, ctx_b)
            ]
            results = await asyncio.gather(*race)
            # both report the outcomes that count (or, started late, find nothing left to do)
            everything = f"{len(payload['k']['members'])} linked"
            assert everything in results
            assert set(results) <= {everything, "nothing to do"}
    finally:
        await shutdown(ctx_a)
        await shutdown(ctx_b)
    final = await status(api, batch_id)
    assert (final["status"], final["processed"], final["linked"]) == ("COMPLETED", 6, 6)
    links = await db.fetch(
        f'SELECT pdf_url FROM "{settings.users_table}" WHERE pdf_url LIKE $1', "pdfs/%"
    )
    assert len(links) == 6
