"""Redis rebuilt from PostgreSQL: a running batch whose live state or work is gone gets it back.

PostgreSQL holds every batch's row and every outcome recorded so far (each is written there
before Redis), and the ZIP stays in storage; Redis holds what can be derived again: the live
counters, the once-only outcome guard, fair dispatch's pending work and arq's jobs. When Redis
loses data (an empty new volume, a failover without its last writes, a job deleted by hand), a
batch PostgreSQL says is PENDING or PROCESSING is rebuilt (`pdfqueue.lifecycle.rebuild`) if, at a
check made in this order (Redis first, PostgreSQL after, so work that ends in between is
seen in one or the other):

- its live state is missing: no batch hash in Redis (`state`);
- or its live state is stale: its counts differ from PostgreSQL's while no work of it is
  queued, so that nothing is recording for it (`state`);
- or its work is missing: none of its jobs (ingest, process, retry, recover) is in arq's queue,
  which holds a job from enqueue to its end, running and waiting out a retry included; none
  is pending in fair dispatch; and yet it has files without an outcome, or was never listed
  (`jobs`, or `ingest` for a batch never listed).

A batch merely slow, or with jobs in flight, has work in the queue, and is left alone. A batch
younger than the grace period is skipped by `reconcile_running` (its row may be written and
its Redis state not yet: `register` writes PostgreSQL first), unless Redis is known to have
lost its data: its epoch key (`keys.redis_epoch`) was gone. `reconcile_batch` (the admin's
`requeue`) does not wait. A rebuild takes the batch's lock, checks again, and acts: running it
twice, or while healthy work goes on, changes nothing. Counts stay exact because Redis counts
each outcome once and is rebuilt from the rows; nothing is linked twice because the claim only
links a user whose `pdf_url` is still NULL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pdfqueue.domain import keys
from pdfqueue.domain.models import TERMINAL, BatchStatus
from pdfqueue.lifecycle import Lifecycle, Rebuilt, rebuild
from pdfqueue.stores.postgres.batches import BatchActivity
from pdfqueue.stores.redis.fair_dispatch import pending_of
from pdfqueue.stores.redis.queue import queued_by_batch

log = logging.getLogger(__name__)
GRACE_S = 10.0
"""A batch created less than this long ago is not checked by `reconcile_running` unless
Redis is known to have lost its data: `register` writes its row before its Redis state."""
LOCK_MS = 60_000
"""How long a rebuild's lock holds at most (a rebuild takes milliseconds; a dead holder's
lock frees itself)."""


@dataclass(frozen=True)
class BatchHealth:
    """One batch as Redis and PostgreSQL showed it, in that order."""

    batch_id: str
    tenant: str
    status: BatchStatus
    """PostgreSQL's."""
    live_status: BatchStatus | None
    """Redis's; None when the live state is missing."""
    live_processed: int | None
    queued: int
    """Its jobs in arq's queue (ready, deferred or running)."""
    pending: int
    """Its jobs registered in fair dispatch and not yet released."""
    total_files: int | None
    processed: int
    """Files with an outcome in PostgreSQL."""

    @property
    def running(self) -> bool:
        return self.status not in TERMINAL

    @property
    def has_work(self) -> bool:
        return self.queued > 0 or self.pending > 0

    @property
    def missing_state(self) -> bool:
        return self.running and self.live_status is None

    @property
    def stale_state(self) -> bool:
        """Live counts differ from PostgreSQL's while nothing is recording (no work queued)."""
        return (
            self.running
            and self.live_status is not None
            and self.live_status not in TERMINAL
            and not self.has_work
            and self.live_processed != self.processed
        )

    @property
    def missing_work(self) -> bool:
        if not self.running or self.has_work or self.live_status in TERMINAL:
            return False
        return self.total_files is None or self.processed < self.total_files

    @property
    def ended_live(self) -> bool:
        """Redis says it ended and PostgreSQL does not yet (a writer died in between)."""
        return self.running and self.live_status in TERMINAL

    @property
    def needs_rebuild(self) -> bool:
        return self.missing_state or self.stale_state or self.missing_work or self.ended_live

    @property
    def why(self) -> list[str]:
        """What is wrong, in words (empty when healthy)."""
        flags = {
            "live state missing": self.missing_state,
            "live state behind PostgreSQL": self.stale_state,
            "no work queued": self.missing_work,
            "ended in Redis only": self.ended_live,
        }
        return [name for name, on in flags.items() if on]


@dataclass
class Report:
    """What one reconciliation did."""

    checked: int = 0
    """Running batches looked at (old enough)."""
    rebuilt: list[Rebuilt] = field(default_factory=list)
    """Those that got something back (or were completed or settled)."""
    busy: list[str] = field(default_factory=list)
    """Candidates another reconciler was rebuilding at the same moment."""
    failed: list[str] = field(default_factory=list)
    """Candidates whose rebuild raised (logged; the next run tries again)."""


async def survey(lifecycle: Lifecycle, batch_ids: list[str]) -> dict[str, BatchHealth]:
    """Each batch's health: Redis read first, then PostgreSQL's rows (see the module), in
    three Redis round trips (one scan of the queue) and one query, however many batches."""
    if not batch_ids:
        return {}
    pending = await pending_of(lifecycle.redis, lifecycle.queue_name, batch_ids)
    queued = await queued_by_batch(lifecycle.redis, lifecycle.queue_name)
    live = await lifecycle.reads.live_brief(batch_ids)
    rows = await lifecycle.batches.activity(running=False, batch_ids=batch_ids)  # after Redis
    found: dict[str, BatchHealth] = {}
    for a in rows:
        s = a.row.summary
        status, processed = live.get(s.batch_id, (None, None))
        found[s.batch_id] = BatchHealth(
            batch_id=s.batch_id,
            tenant=a.row.tenant,
            status=s.status,
            live_status=status,
            live_processed=processed,
            queued=queued.get(s.batch_id, 0),
            pending=pending[s.batch_id],
            total_files=s.total_files,
            processed=a.recorded,
        )
    return found


async def reconcile_running(
    lifecycle: Lifecycle, *, grace_s: float = GRACE_S, tenant: str | None = None
) -> Report:
    """Rebuild every running batch (of `tenant`, or all) that needs it; returns the report.

    Safe at any time and from any number of processes at once: at worker start, in the
    operator's leader periodically, by hand (`pdfqueue admin requeue`).
    """
    report = Report()
    since = datetime.now(UTC) - timedelta(seconds=grace_s)
    running = await lifecycle.batches.activity(tenant=tenant, queue_name=lifecycle.queue_name)
    ids = [a.row.summary.batch_id for a in running if a.row.summary.created_at <= since]
    report.checked = len(ids)
    for batch_id, health in (await survey(lifecycle, ids)).items():
        if not health.needs_rebuild:
            continue
        try:
            done = await reconcile_batch(lifecycle, batch_id)
        except Exception:  # one batch's trouble must not hold up the others
            log.exception("rebuilding the batch failed", extra={"batch_id": batch_id})
            report.failed.append(batch_id)
            continue
        if done is None:
            report.busy.append(batch_id)
        elif done.what or done.settled:  # not when its writer finished it in between
            report.rebuilt.append(done)
    if report.rebuilt or report.failed:
        log.info(
            "reconciled %d running batches: %d rebuilt, %d busy, %d failed",
            report.checked,
            len(report.rebuilt),
            len(report.busy),
            len(report.failed),
        )
    return report


async def reconcile_at_start(
    lifecycle: Lifecycle, *, grace_s: float = GRACE_S, timeout_s: float = 60.0
) -> Report | None:
    """A process's start (worker, operator): mark Redis's epoch, then reconcile. Never raises
    (None on failure, logged): the next start, or the periodic check, tries again."""
    try:
        async with asyncio.timeout(timeout_s):
            if await _new_epoch(lifecycle):
                grace_s = 0  # Redis lost its data (or is new): young batches lost theirs too
            return await reconcile_running(lifecycle, grace_s=grace_s)
    except Exception as exc:
        log.warning("reconciling running batches at start failed: %r", exc)
        return None


async def reconcile_if_reset(lifecycle: Lifecycle) -> Report | None:
    """Reconcile when Redis lost its data since this was last called anywhere (its epoch key
    is gone): one command while Redis keeps its data, so every worker can ask every few
    seconds; the first to find the key missing writes it again and reconciles every running
    batch, the youngest too (whatever Redis held of them is gone)."""
    if not await _new_epoch(lifecycle):
        return None
    log.warning("Redis lost its data (its epoch key was gone): rebuilding running batches")
    return await reconcile_running(lifecycle, grace_s=0)


async def _new_epoch(lifecycle: Lifecycle) -> bool:
    """Write the queue's epoch key if it is missing; True when it was (Redis lost its data,
    or is new)."""
    key = keys.redis_epoch(lifecycle.queue_name)
    return bool(await lifecycle.redis.set(key, str(int(time.time())), nx=True))


async def reconcile_batch(lifecycle: Lifecycle, batch_id: str) -> Rebuilt | None:
    """Check one batch under its rebuild lock and rebuild what it misses (nothing when it
    is healthy); None when another reconciler holds the lock. Raises InvalidBatchId for
    anything but a batch id."""
    lock = keys.recovering(keys.checked(batch_id))
    token = time.time_ns() // 1000
    redis = lifecycle.redis
    if not await redis.set(lock, str(token), nx=True, px=LOCK_MS):
        return None
    try:
        health = (await survey(lifecycle, [batch_id])).get(batch_id)
        if health is None or not health.needs_rebuild:
            row = await lifecycle.batches.get(batch_id)
            return Rebuilt(batch_id, row.tenant if row else "", (), row.summary if row else None)
        return await rebuild(
            lifecycle,
            batch_id,
            state=health.missing_state,
            stale=health.stale_state,
            work=health.missing_work,
            token=token,
        )
    finally:
        held = await redis.get(lock)
        if held is not None and int(held) == token:
            await redis.delete(lock)


def stalled(activity: BatchActivity, idle_s: float, now: datetime | None = None) -> bool:
    """A running batch that recorded no file (nor was created) in the last `idle_s`."""
    now = now or datetime.now(UTC)
    last = activity.last_recorded_at or activity.row.summary.created_at
    return activity.row.summary.status not in TERMINAL and (now - last).total_seconds() >= idle_s
