"""Registering a batch whose ZIP is already stored: shared by the API and the operator."""

from __future__ import annotations

from redis.asyncio import Redis

from pdfqueue import keys, metrics
from pdfqueue.db import Database
from pdfqueue.models import TERMINAL, BatchStatus, BatchSummary
from pdfqueue.queue import Job, enqueue
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
) -> BatchSummary:
    """Create the durable row and the live state and enqueue `ingest`, each only once.

    Safe to call again for the same batch (an operator re-reconciling, a retried request):
    an existing row is kept, live state is not reset, and the ingest job id is deterministic.
    """
    summary = await db.create_batch(batch_id, tenant, source_key)
    if summary.status in TERMINAL:
        return summary
    created = await state.create(batch_id, tenant, summary.created_at)
    job = Job(keys.ingest_job(batch_id), "ingest", {"batch_id": batch_id, "source": source_key})
    await enqueue(redis, queue_name, [job])
    if created:
        metrics.batch_entered(BatchStatus.PENDING)
    return summary
