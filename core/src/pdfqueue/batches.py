"""Registering, reading and cancelling batches: shared by the API and the operator."""

from __future__ import annotations

from redis.asyncio import Redis

from pdfqueue import keys, metrics
from pdfqueue.db import Database
from pdfqueue.errors import BatchConflict
from pdfqueue.fair import drop_pending
from pdfqueue.models import TERMINAL, BatchStatus, BatchSummary
from pdfqueue.queue import Job, enqueue, queued_with_prefix, remove
from pdfqueue.state import BatchState


async def register_batch(
    db: Database,
    state: BatchState,
    redis: Redis,
    queue_name: str,
    *,
    batch_id: str,
    tenant: str,
    source_key: str,
    pdfbatch_uid: str | None = None,
    file_name: str | None = None,
) -> BatchSummary:
    """Create the durable row and the live state and enqueue `ingest`, each only once.

    Safe to call again for the same batch (an operator re-reconciling, a retried request):
    an existing row is kept, live state is not reset, and the ingest job id is deterministic.
    An existing row with another tenant, source or PdfBatch raises BatchConflict: live state
    only ever carries the tenant PostgreSQL holds.
    """
    row = await db.create_batch(
        batch_id, tenant, source_key, pdfbatch_uid=pdfbatch_uid, file_name=file_name
    )
    if (row.tenant, row.source_key, row.pdfbatch_uid) != (tenant, source_key, pdfbatch_uid):
        raise BatchConflict(batch_id)
    summary = row.summary
    if summary.status in TERMINAL:
        return summary
    created = await state.create(batch_id, row.tenant, summary.created_at, summary.file_name)
    job = Job(keys.ingest_job(batch_id), "ingest", {"batch_id": batch_id, "source": source_key})
    await enqueue(redis, queue_name, [job])
    if created:
        metrics.batch_entered(BatchStatus.PENDING)
    return summary


async def read_batch(db: Database, state: BatchState, batch_id: str) -> BatchSummary | None:
    """The live summary, or the durable one once the live state has expired; None if unknown."""
    live = await state.read(batch_id)
    if live is not None:
        return live[0]
    durable = await db.batch(batch_id)
    return durable[0] if durable is not None else None


async def cancel_batch(
    db: Database, state: BatchState, redis: Redis, queue_name: str, batch_id: str
) -> int:
    """Mark the batch CANCELLED and drop its pending and queued jobs; returns how many were
    dropped.

    Running jobs finish and are counted (`process` checks the status before it starts). The
    caller decides whether the batch may still be cancelled, i.e. is not terminal yet.
    """
    await state.set_status(batch_id, BatchStatus.CANCELLED)
    await db.finish_batch(batch_id, BatchStatus.CANCELLED)
    metrics.batch_entered(BatchStatus.CANCELLED)
    dropped = await drop_pending(redis, queue_name, batch_id)
    pending = [keys.ingest_job(batch_id)]
    pending += await queued_with_prefix(redis, queue_name, keys.process_job_prefix(batch_id))
    return dropped + await remove(redis, queue_name, pending)


async def settle(db: Database, state: BatchState, batch_id: str) -> None:
    """Write to PostgreSQL a terminal status that Redis holds; idempotent.

    Every transition writes Redis first, then PostgreSQL: a process that dies in between
    leaves the durable row unfinished, and it would hold one of its tenant's concurrent-batch
    slots for good. Whatever runs next for the batch (a redelivered job, a repeated cancel)
    calls this.
    """
    live = await state.read(batch_id)
    if live is not None and live[0].status in TERMINAL:
        await db.finish_batch(batch_id, live[0].status, live[0].error)
