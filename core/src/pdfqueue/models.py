"""Batch and file states, outcomes and the status record shared by API, worker and operator."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel


class BatchStatus(StrEnum):
    PENDING = "PENDING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL = frozenset({BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.CANCELLED})


class Outcome(StrEnum):
    """What happened to one file; every counted file ends with exactly one of these."""

    LINKED = "linked"
    SKIPPED_NO_MATCH = "skipped_no_match"
    SKIPPED_ALREADY_EXISTS = "skipped_already_exists"
    FAILED = "failed"


COUNTERS = tuple(o.value for o in Outcome)


@dataclass(frozen=True)
class FileRef:
    """One file of one batch: its index in the ZIP is its identity, the name is a label."""

    batch_id: str
    index: int
    name: str


class BatchSummary(BaseModel):
    """The public status of a batch (`GET /v1/batches/{id}`)."""

    batch_id: str
    status: BatchStatus
    total_files: int | None
    processed: int
    linked: int
    skipped_no_match: int
    skipped_already_exists: int
    failed: int
    ignored: int = 0
    """Members that are not PDFs (directories excluded); listed in the report, not counted."""
    error: str | None = None
    created_at: datetime
    completed_at: datetime | None = None


class FileResult(BaseModel):
    """One line of the per-file report."""

    index: int
    name: str
    outcome: Outcome | Literal["ignored"]
    """`ignored` for a member that is not a PDF by name: reported, never counted."""
    reason: str | None = None
    user_id: int | None = None
    """The matched user; null unless the tenant is in `PDFQUEUE_TRUSTED_TENANTS`."""
    object_key: str | None = None
    """Where the linked PDF is stored; null unless the tenant is in `PDFQUEUE_TRUSTED_TENANTS`."""
    sha256: str | None = None
