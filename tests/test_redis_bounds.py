"""Redis stays bounded: every key a batch leaves behind expires, or is gone when it ends."""

from __future__ import annotations

import re

import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.redis.queue import JOB_EXPIRES_MS
from tests.support.helpers import MakeCorpus, RunWorker, upload


async def keys_of(redis: Redis, *marks: str) -> dict[str, int]:
    """Every key naming one of `marks` (a batch id, a queue), with its TTL in seconds."""
    found: dict[str, int] = {}
    async for raw in redis.scan_iter(count=1000):
        key = raw.decode()
        if any(m in key for m in marks):
            found[key] = await redis.ttl(key)
    return found


# a tenant webhook (refused at delivery: loopback), so its job's keys are covered too
@pytest.mark.settings(max_tries=2, webhook_urls={"acme": "https://127.0.0.1:9/hook"})
async def test_every_key_a_batch_creates_expires_or_is_deleted(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
) -> None:
    corpus, path = await make_corpus(40, seed=31)
    assert corpus.counts()["failed"] > 0  # so the retry below re-runs some files
    batch_id = await upload(api, path)
    await run_worker()
    assert (await api.get(f"/v1/batches/{batch_id}")).json()["status"] == "COMPLETED"
    retried = await api.post(f"/v1/batches/{batch_id}/retry", params={"all_failed": "true"})
    assert retried.status_code == 202
    await run_worker()
    assert (await api.get(f"/v1/batches/{batch_id}")).json()["status"] == "COMPLETED"

    left = await keys_of(redis, batch_id, settings.queue_name)
    fair = re.escape(f"pdfqueue:fair:{settings.queue_name}:")
    bounds = {  # what may be left, and for how long at most
        rf"pdfqueue:batch:{batch_id}(:outcomes)?": settings.batch_ttl_s,
        rf"arq:result:(ingest|retry|process|delivery):{batch_id}(:r?\d+)*": settings.batch_ttl_s,
        # the deliveries' fair dispatch has keys of its own, under the delivery queue's name
        rf"{fair}(deliveries:)?b:{batch_id}:meta": JOB_EXPIRES_MS // 1000,
        rf"{fair}(deliveries:)?workers": 3 * settings.dispatch_tick_s + 1,
    }
    # One key per queue, never expiring by design: its absence tells the workers that Redis
    # lost its data (pdfqueue.recovery).
    left.pop(f"pdfqueue:epoch:{settings.queue_name}", None)
    for key, ttl in left.items():
        bound = next((b for pattern, b in bounds.items() if re.fullmatch(pattern, key)), None)
        assert bound is not None, f"{key} is not a key a finished batch may leave"
        assert 0 < ttl <= bound, (key, ttl)
    assert f"pdfqueue:batch:{batch_id}" in left
    assert f"arq:result:delivery:{batch_id}:1" in left
    assert not any(k.startswith("arq:job:") or "in-progress" in k for k in left)
    assert await redis.zcard(settings.queue_name) == 0
