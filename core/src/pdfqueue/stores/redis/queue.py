"""The arq queue as producers see it: JSON job payloads and idempotent, pipelined enqueue."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from arq.constants import (
    in_progress_key_prefix,
    job_key_prefix,
    result_key_prefix,
    retry_key_prefix,
)
from arq.jobs import serialize_job
from redis import exceptions as rx
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import RedisUnavailable
from pdfqueue.observability.tracing import producer_span
from pdfqueue.stores.driver_errors import redis_connection_lost, redis_errors, typed_call
from pdfqueue.stores.redis.scripts import lua


def worker_lost_redis(exc: BaseException) -> bool:
    """Whether an exception out of arq's worker loop (which calls redis-py itself, not
    through a store) means Redis went away, so that the worker should reconnect, not end."""
    return isinstance(exc, RedisUnavailable) or redis_connection_lost(exc)


JOB_EXPIRES_MS = 7 * 24 * 3600 * 1000
"""A job not started within this long is dropped by arq; a week outlasts any idle cluster."""

_ENQUEUE = lua("enqueue")
_SCAN_PREFIX = lua("scan_prefix")


def serialize(obj: Any) -> bytes:
    """arq serializer: JSON, because unpickling what Redis hands over would run code."""
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


def deserialize(data: bytes) -> Any:
    return json.loads(data)


@dataclass(frozen=True)
class Job:
    """One arq job: a deterministic id, so enqueueing the same work twice is a no-op."""

    job_id: str
    function: str
    kwargs: dict[str, Any]
    defer_s: float = 0.0
    cost: int = 1
    """What the job weighs in fair dispatch: the PDFs it handles."""


@typed_call(redis_errors)
async def enqueue(redis: Redis, queue_name: str, jobs: Sequence[Job]) -> int:
    """Add `jobs` to the queue in one round trip; returns how many were new.

    Inside a PRODUCER span; each job's kwargs gain `trace`, that span's W3C context, which
    the consumer continues or links to (`pdfqueue_worker.observe.observed_job`).
    """
    if not jobs:
        return 0
    argv: list[Any] = [job_key_prefix, result_key_prefix, JOB_EXPIRES_MS]
    with encoded(queue_name, jobs) as payloads:
        for job, (score_ms, payload) in zip(jobs, payloads, strict=True):
            argv += [job.job_id, score_ms, payload]
        added: int = await redis.eval(_ENQUEUE, 1, queue_name, *argv)  # type: ignore[misc]
    return added


@contextmanager
def encoded(queue_name: str, jobs: Sequence[Job]) -> Iterator[list[tuple[int, bytes]]]:
    """Each job's queue score and arq payload, inside the PRODUCER span that sends them."""
    now_ms = int(time.time() * 1000)
    first = jobs[0]
    with producer_span(first.function, queue_name, len(jobs), first.kwargs.get("batch_id")) as tc:
        out = []
        for job in jobs:
            kwargs = {**job.kwargs, "trace": tc} if tc else job.kwargs
            payload = serialize_job(job.function, (), kwargs, None, now_ms, serializer=serialize)
            out.append((now_ms + int(job.defer_s * 1000), payload))
        yield out


async def enqueue_chunked(redis: Redis, queue_name: str, jobs: Iterable[Job], chunk: int) -> int:
    """`enqueue` in chunks, so 50,000 jobs never make one giant Lua call."""
    added, batch = 0, []
    for job in jobs:
        batch.append(job)
        if len(batch) >= chunk:
            added += await enqueue(redis, queue_name, batch)
            batch = []
    if batch:
        added += await enqueue(redis, queue_name, batch)
    return added


@typed_call(redis_errors)
async def remove(redis: Redis, queue_name: str, job_ids: Sequence[str]) -> int:
    """Drop queued jobs that have not started (cancellation); running ones are unaffected."""
    if not job_ids:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrem(queue_name, *job_ids)
        pipe.delete(*(job_key_prefix + j for j in job_ids))
        removed, _ = await pipe.execute()
    return int(removed)


@typed_call(redis_errors)
async def queued_with_prefix(
    redis: Redis, queue_name: str, prefix: str, count: int = 1000
) -> list[str]:
    """Ids of the queued jobs whose id starts with `prefix`, compared as plain text in Redis.

    Never `ZSCAN MATCH`: a glob built from an id lets `*` or `?` in it select other jobs.
    """
    found: list[str] = []
    cursor = "0"
    while True:
        raw_cursor, members = await redis.eval(  # type: ignore[misc]
            _SCAN_PREFIX, 1, queue_name, cursor, prefix, str(count)
        )
        found += [m.decode() if isinstance(m, bytes) else m for m in members]
        cursor = raw_cursor.decode() if isinstance(raw_cursor, bytes) else str(raw_cursor)
        if cursor == "0":
            return found


@typed_call(redis_errors)
async def queued_by_batch(redis: Redis, queue_name: str, count: int = 1000) -> dict[str, int]:
    """How many jobs of each batch's work (`keys.BATCH_WORK_JOBS`) are in the queue: ready,
    deferred (a retry's backoff) or running, as arq keeps a job in its sorted set until the
    job ends. One ZSCAN of the whole queue, however many batches there are.

    Only a member with its job key counts: arq drops one without (a worker that outlived a
    Redis that came back empty re-adds its job's id when the try fails, not the job)."""
    found: dict[str, int] = {}
    cursor = 0
    while True:
        cursor, members = await redis.zscan(queue_name, cursor, count=count)
        ids = [m.decode(errors="replace") if isinstance(m, bytes) else m for m, _ in members]
        work = [(j, b) for j in ids if (b := keys.batch_of_job(j)) is not None]
        if work:
            async with redis.pipeline(transaction=False) as pipe:
                for job_id, _ in work:
                    pipe.exists(job_key_prefix + job_id)
                there = await pipe.execute()
            for (_, batch_id), exists in zip(work, there, strict=True):
                if exists:
                    found[batch_id] = found.get(batch_id, 0) + 1
        if not cursor:
            return found


@typed_call(redis_errors)
async def forget_results(redis: Redis, job_ids: Sequence[str]) -> int:
    """Drop the results arq keeps of ended jobs, so the same ids can be queued again (a job
    whose work was lost: its run re-checks which of its files still lack an outcome)."""
    if not job_ids:
        return 0
    removed: int = await redis.delete(*(result_key_prefix + j for j in job_ids))
    return removed


@typed_call(redis_errors)
async def forget_jobs(redis: Redis, job_ids: Sequence[str]) -> int:
    """Drop every key arq and pdfqueue keep per job id: the job (its arguments), its result
    (arguments too, kept for `keep_result`), its in-progress and retry marks, its last error.
    Returns how many keys were there."""
    if not job_ids:
        return 0
    names = [
        prefix + job_id
        for job_id in job_ids
        for prefix in (job_key_prefix, result_key_prefix, in_progress_key_prefix, retry_key_prefix)
    ]
    names += [keys.last_error(job_id) for job_id in job_ids]
    removed: int = await redis.unlink(*names)
    return removed


async def check_durability(redis: Redis) -> list[str]:
    """What makes this Redis unsafe for a queue: eviction drops jobs, no AOF loses them.

    Read from INFO (`maxmemory_policy`, `aof_enabled`), which managed services allow where
    they refuse CONFIG (ElastiCache, MemoryDB and Memorystore restrict CONFIG, not INFO).
    """
    try:
        memory = await redis.info("memory")
        persistence = await redis.info("persistence")
    except Exception as exc:  # an ACL user without +info, a proxy that drops INFO
        return [f"cannot verify Redis durability (INFO refused: {exc})"]
    policy, aof = memory.get("maxmemory_policy"), persistence.get("aof_enabled")
    if policy is None or aof is None:
        return ["cannot verify Redis durability (INFO names no maxmemory_policy or aof_enabled)"]
    problems = []
    if policy != "noeviction":
        problems.append(
            f"maxmemory-policy is {policy!r}; queued jobs can be evicted (set it to 'noeviction')"
        )
    if str(aof) != "1":
        problems.append("appendonly is off; a Redis restart loses queued jobs (set appendonly yes)")
    return problems


@typed_call(redis_errors)
async def memory_share(redis: Redis) -> float | None:
    """Redis's used memory as a share of its maxmemory; None without a limit, or where INFO
    is not allowed (some managed services)."""
    try:
        memory = await redis.info("memory")
    except rx.ResponseError:  # INFO disabled: nothing to go by
        return None
    limit = int(memory.get("maxmemory", 0) or 0)
    return int(memory.get("used_memory", 0) or 0) / limit if limit else None
