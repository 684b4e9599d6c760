"""Redis key names and arq job ids: one place, so producers and consumers always agree."""

from __future__ import annotations

PREFIX = "pdfqueue"


def batch(batch_id: str) -> str:
    """Hash with the batch's status and counters (TTL, refreshed while it runs)."""
    return f"{PREFIX}:batch:{batch_id}"


def outcomes(batch_id: str) -> str:
    """Hash of file index -> outcome: the once-only guard behind every counter."""
    return f"{PREFIX}:batch:{batch_id}:outcomes"


def quota(tenant: str, name: str) -> str:
    """A tenant's quota counter: `uploads`, `inflight` or `bytes:<UTC date>`."""
    return f"{PREFIX}:quota:{tenant}:{name}"


def ingest_job(batch_id: str) -> str:
    return f"ingest:{batch_id}"


def process_job(batch_id: str, index: int) -> str:
    return f"process:{batch_id}:{index}"


def last_error(job_id: str) -> str:
    """Why a job's latest try failed: its reason if it runs out of tries."""
    return f"{PREFIX}:last-error:{job_id}"


def worker_heartbeat(pod_name: str) -> str:
    """A worker pod's running-job count (TTL): the operator scales in idle pods first."""
    return f"{PREFIX}:worker:{pod_name}:running"


def operator_batches(queue_name: str) -> str:
    """Hash of batch id -> the PdfBatch object mirroring it, until the batch is terminal.

    Kept in Redis, not in the operator's memory, so a PdfBatch deleted while the operator
    was down is still noticed (and its batch cancelled) when it comes back.
    """
    return f"{PREFIX}:operator:{queue_name}:pdfbatches"
