"""Batch and file states, outcomes and the status record shared by API, worker and operator."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, computed_field


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
    SKIPPED_AMBIGUOUS = "skipped_ambiguous"
    """Addresses of two different users where the owner's belongs: no guess, no link."""


COUNTERS = tuple(o.value for o in Outcome)


UserId = int | str
"""A user's id as the host's table has it: an integer, or the text of a UUID or a text id."""


@dataclass(frozen=True)
class FileRef:
    """One file of one batch: its index in the ZIP is its identity, the name is a label."""

    batch_id: str
    index: int
    name: str


@dataclass(frozen=True)
class Decision:
    """One file's outcome as processing decided it, before (or as) it is stored."""

    outcome: Outcome
    reason: str | None = None
    user_id: UserId | None = None
    sha256: str | None = None
    stored: bool = False
    """The claim already wrote the durable row (in the same statement as the UPDATE)."""
    ocr: bool = False
    """The address was looked for by OCR (the file had pages without a usable text layer)."""


@dataclass(frozen=True)
class Claim:
    """A file that found its user and stored its PDF, asking to link the user to it."""

    ref: FileRef
    user_id: UserId
    object_key: str
    sha256: str
    ocr: bool = False


def failed(reason: str) -> Decision:
    return Decision(Outcome.FAILED, reason)


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
    skipped_ambiguous: int = 0
    """Files naming two different users where the owner's address belongs (never linked)."""
    ignored: int = 0
    """Members that are not PDFs (directories excluded); listed in the report, not counted."""
    error: str | None = None
    """Why the batch FAILED, in words (never a member name); null otherwise."""
    reason: str | None = None
    """Why the batch FAILED, as a bounded code (`no_pdf_members`, `not_a_zip`, ...: the
    batch reasons of docs/user-guide/outcomes.md); null otherwise."""
    created_at: datetime
    completed_at: datetime | None = None
    file_name: str | None = None
    """The uploaded file's name as its uploader gave it (sanitised, display only)."""
    retries: int = 0
    """Retries of the batch's failed files so far (`POST /v1/batches/{id}/retry`)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration_s(self) -> float | None:
        """Seconds from upload to the terminal state; null while the batch runs."""
        if self.completed_at is None:
            return None
        return round((self.completed_at - self.created_at).total_seconds(), 3)


@dataclass(frozen=True)
class OwnedBatch:
    """A batch's summary and the tenant it belongs to (bound once, never from user input)."""

    summary: BatchSummary
    tenant: str


@dataclass(frozen=True)
class RetryRound:
    """A retry round of one batch: its number, and where its ZIP is."""

    batch_id: str
    number: int
    source_key: str
    started: bool
    """This call started it; False when it resumed one a previous call left half done."""


class BatchPage(BaseModel):
    """One page of a tenant's batches, newest first (`GET /v1/batches`)."""

    batches: list[BatchSummary]
    next_cursor: str | None
    """Pass as `cursor` for the next page; null on the last page."""


FileSort = Literal["index", "-index", "name", "-name", "outcome", "-outcome"]
"""Orders of the paged report: a column, descending with a leading `-`."""


@dataclass(frozen=True)
class FileQuery:
    """Which rows of a report to read: filters, order and the page."""

    outcome: str | None = None
    reason: str | None = None
    search: str | None = None
    """A substring of the file name, matched case-insensitively."""
    sort: FileSort = "index"
    offset: int = 0
    limit: int = 50


class FileResult(BaseModel):
    """One line of the per-file report."""

    index: int
    name: str
    outcome: Outcome | Literal["ignored", "retrying"]
    """`ignored` for a member that is not a PDF by name: reported, never counted;
    `retrying` while a retry of the batch has not yet decided the file again."""
    reason: str | None = None
    user_id: UserId | None = None
    """The matched user, by the users table's id (a number, or text for UUID and text ids);
    null unless the tenant is in `PDFQUEUE_TRUSTED_TENANTS`."""
    object_key: str | None = None
    """Where the linked PDF is stored; null unless the tenant is in `PDFQUEUE_TRUSTED_TENANTS`."""
    sha256: str | None = None
    ocr: bool = False
    """The address was looked for by OCR (the file had pages without a usable text layer)."""
    tries: int = 1
    """How many times the file was processed: 1, plus one per retry that re-ran it."""
    previous_reason: str | None = None
    """Why the file failed before its latest retry; null if it was never retried."""


class ReasonCount(BaseModel):
    outcome: str
    reason: str | None
    files: int


class FilePage(BaseModel):
    """One page of a batch's report (`GET /v1/batches/{id}/files/page`)."""

    total: int
    """Rows matching the filters, over all pages."""
    offset: int
    limit: int
    files: list[FileResult]
    reasons: list[ReasonCount]
    """Every (outcome, reason) of the batch with its number of files: the filters' choices."""
