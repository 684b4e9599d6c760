"""Fair dispatch: process jobs wait as pending work and are released into arq in small windows.

arq runs jobs in the order they were enqueued, so one big batch would hold every worker for
hours. Instead ingest registers a batch's jobs as pending work (per batch, in Redis) and one
atomic script (`lua/fair_dispatch.lua`) releases them: weighted deficit round robin across
tenants, cost counted in PDFs; round robin across a tenant's active batches; and never more
ready plus running jobs than the window overall, per tenant and per batch. The script runs
when a batch is ingested, when a process job finishes, and on a tick in every worker, so the
slots of a worker killed mid-job come back once arq has rerun and finished its job.

Nothing is released twice: popping a pending job and enqueueing it is one script, and arq's
deterministic job ids make a second enqueue of the same work a no-op anyway. In-flight counts
are derived from arq's queue on every call, so they heal by themselves.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from arq.constants import job_key_prefix, result_key_prefix
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.observability.periodic import Periodic
from pdfqueue.stores.driver_errors import redis_errors, typed_call, typed_methods
from pdfqueue.stores.redis.queue import JOB_EXPIRES_MS, Job, encoded
from pdfqueue.stores.redis.scripts import lua

log = logging.getLogger(__name__)


_REGISTER = lua("fair_register")
_DISPATCH = lua("fair_dispatch")
_PENDING = lua("fair_pending")
_DROP = lua("fair_drop")


def _pairs(mapping: Mapping[str, int]) -> list[Any]:
    argv: list[Any] = [len(mapping)]
    for name, value in sorted(mapping.items()):
        argv += [name, value]
    return argv


@dataclass(frozen=True)
class Worker:
    """A live worker as the dispatcher counts it: `<random id>:<max_jobs>`, until its lease."""

    member: str
    lease_s: float


@typed_methods(redis_errors)
@dataclass(frozen=True)
class Dispatcher:
    """The fair-dispatch windows and weights of one queue."""

    redis: Redis
    queue_name: str
    window: int = 0
    tenant_window: int = 0
    batch_window: int = 0
    quantum: int = 16
    window_floor: int = 1
    weights: Mapping[str, int] = field(default_factory=dict)
    caps: Mapping[str, int] = field(default_factory=dict)
    deferred_hold: bool = False
    """Retries waiting out their backoff keep their tenant's and batch's slots (deliveries)."""

    @classmethod
    def from_settings(cls, redis: Redis, settings: Settings) -> Dispatcher:
        return cls(
            redis=redis,
            queue_name=settings.queue_name,
            window=settings.dispatch_window_jobs,
            tenant_window=settings.dispatch_tenant_window_jobs,
            batch_window=settings.dispatch_batch_window_jobs,
            quantum=settings.pdfs_per_job,
            window_floor=2 * settings.max_jobs,
            weights=settings.dispatch_tenant_weights,
            caps=settings.dispatch_tenant_inflight_caps,
        )

    @classmethod
    def for_deliveries(cls, redis: Redis, settings: Settings) -> Dispatcher:
        """The webhook deliveries' dispatcher, over their own queue: each tenant gets at most
        `webhook_tenant_concurrency` in flight (its retries waiting out a backoff included),
        the tenants taking turns in the delivery slots of the live workers."""
        return cls(
            redis=redis,
            queue_name=keys.delivery_queue(settings.queue_name),
            tenant_window=settings.webhook_tenant_concurrency,
            batch_window=1,
            quantum=1,
            window_floor=settings.webhook_concurrency,
            deferred_hold=True,
        )

    @property
    def prefix(self) -> str:
        return keys.fair_prefix(self.queue_name)

    async def register(
        self, batch_id: str, tenant: str, jobs: Iterable[Job], chunk: int, first: int = 0
    ) -> int:
        """Add the batch's jobs as pending work, `chunk` per round trip; returns how many
        were new. Replaying the same jobs (a rerun ingest) adds nothing. Chunks are numbered
        from `first` (a retry round's jobs follow those the batch registered before)."""
        added, part, number = 0, [], first
        for job in jobs:
            part.append(job)
            if len(part) >= chunk:
                added += await self._register(batch_id, tenant, part, number)
                part, number = [], number + 1
        if part or number == first:
            added += await self._register(batch_id, tenant, part, number)
        return added

    async def _register(self, batch_id: str, tenant: str, jobs: Sequence[Job], number: int) -> int:
        argv: list[Any] = [self.prefix, keys.checked(batch_id), tenant, number, JOB_EXPIRES_MS]
        if jobs:
            with encoded(self.queue_name, jobs) as payloads:
                for job, (_, payload) in zip(jobs, payloads, strict=True):
                    argv.append(f"{job.job_id}\n{job.cost}\n".encode() + payload)
        added: int = await self.redis.eval(  # type: ignore[misc]
            _REGISTER, 2, keys.batch(batch_id), keys.ERASED, *argv
        )
        return added

    async def dispatch(self, finishing: str | None = None, worker: Worker | None = None) -> int:
        """Release what the windows allow; `finishing` is a job that is ending now and no
        longer holds a slot; `worker` announces a live worker (its slots size the window).
        Returns how many jobs were released."""
        now_ms = int(time.time() * 1000)
        argv: list[Any] = [
            self.prefix,
            job_key_prefix,
            result_key_prefix,
            JOB_EXPIRES_MS,
            now_ms,
            self.window,
            self.tenant_window,
            self.batch_window,
            self.quantum,
            finishing or "",
            worker.member if worker else "",
            now_ms + int(worker.lease_s * 1000) if worker else 0,
            self.window_floor,
            int(self.deferred_hold),
            *_pairs(self.weights),
            *_pairs(self.caps),
        ]
        released: int = await self.redis.eval(_DISPATCH, 1, self.queue_name, *argv)  # type: ignore[misc]
        return released


async def chunks_before(redis: Redis, queue_name: str, batch_id: str, tag: str) -> int:
    """Where the chunks of the work named `tag` start: the batch's chunk count when `tag` is
    first asked about, the same number ever after (so replaying that work adds nothing)."""
    meta = f"{keys.fair_prefix(queue_name)}b:{keys.checked(batch_id)}:meta"
    now = await redis.hget(meta, "chunks")  # type: ignore[misc]
    await redis.hsetnx(meta, tag, str(int(now or 0)))  # type: ignore[misc]
    await redis.pexpire(meta, JOB_EXPIRES_MS)
    return int(await redis.hget(meta, tag))  # type: ignore[misc]


async def pending_jobs(redis: Redis, queue_name: str) -> int:
    """Jobs registered and not yet released into the queue, over every tenant and batch."""
    total: int = await redis.eval(_PENDING, 0, keys.fair_prefix(queue_name))  # type: ignore[misc]
    return total


@typed_call(redis_errors)
async def pending_of(redis: Redis, queue_name: str, batch_ids: Sequence[str]) -> dict[str, int]:
    """Each batch's jobs registered and not yet released (0 for none), in one round trip."""
    if not batch_ids:
        return {}
    prefix = keys.fair_prefix(queue_name)
    async with redis.pipeline(transaction=False) as pipe:
        for batch_id in batch_ids:
            pipe.llen(f"{prefix}b:{keys.checked(batch_id)}:pending")
        lengths = await pipe.execute()
    return {b: int(n) for b, n in zip(batch_ids, lengths, strict=True)}


@typed_call(redis_errors)
async def drop_pending(redis: Redis, queue_name: str, batch_id: str) -> int:
    """Forget the batch's pending work (cancellation); returns how many jobs were dropped."""
    prefix = keys.fair_prefix(queue_name)
    dropped: int = await redis.eval(_DROP, 0, prefix, keys.checked(batch_id))  # type: ignore[misc]
    return dropped


def dispatch_ticker(dispatcher: Dispatcher, interval_s: float, max_jobs: int) -> Periodic:
    """A worker's periodic dispatch: it announces the worker (its slots size the window) and
    recovers slots nobody else frees (a killed worker's)."""
    me = Worker(f"{uuid.uuid4().hex}:{max_jobs}", lease_s=3 * interval_s + 1)
    return Periodic("fair-dispatch", interval_s, lambda: dispatcher.dispatch(worker=me))
