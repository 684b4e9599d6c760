"""Redis key names and arq job ids: one place, so producers and consumers always agree."""

from __future__ import annotations

PREFIX = "pdfqueue"


def batch(batch_id: str) -> str:
    """Hash with the batch's status and counters (TTL, refreshed while it runs)."""
    return f"{PREFIX}:batch:{batch_id}"


def outcomes(batch_id: str) -> str:
    """Hash of file index -> outcome: the once-only guard behind every counter."""
    return f"{PREFIX}:batch:{batch_id}:outcomes"


def ingest_job(batch_id: str) -> str:
    return f"ingest:{batch_id}"


def process_job(batch_id: str, index: int) -> str:
    return f"process:{batch_id}:{index}"


def last_error(job_id: str) -> str:
    """Why a job's latest try failed: its reason if it runs out of tries."""
    return f"{PREFIX}:last-error:{job_id}"
