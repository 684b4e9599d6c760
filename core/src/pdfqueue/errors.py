"""Errors pdfqueue raises; the type says whether retrying can help."""

from __future__ import annotations

from asyncpg.exceptions import SyntaxOrAccessError


class PdfQueueError(Exception):
    """Root of every pdfqueue error."""


class PermanentError(PdfQueueError):
    """Bad input: retrying cannot help (HTTP 4xx, kopf.PermanentError, no arq retry)."""


class TransientError(PdfQueueError):
    """A dependency is flaky or down: retry later with backoff."""


class ConfigurationError(PdfQueueError):
    """Settings a process cannot run with; it says which and refuses to start."""


class BatchNotFound(PermanentError):
    def __init__(self, batch_id: str) -> None:
        super().__init__(f"batch {batch_id} not found")
        self.batch_id = batch_id


class InvalidBatchId(PermanentError):
    """Not a batch id (32 lowercase hex digits): refused before it reaches a key or a query."""

    def __init__(self, value: str) -> None:
        super().__init__(f"{value[:40]!r} is not a batch id (32 lowercase hex digits)")


class BatchConflict(PermanentError):
    """The batch exists already with another tenant, source or object: it is not yours."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"batch {batch_id} exists already and belongs to something else")
        self.batch_id = batch_id


class BatchNotRetryable(PermanentError):
    """The batch cannot be retried now (HTTP 409): not completed yet, or nothing to re-run."""

    def __init__(self, batch_id: str, why: str) -> None:
        super().__init__(f"batch {batch_id} cannot be retried: {why}")
        self.batch_id = batch_id
        self.why = why


class UnsafeCallback(PermanentError):
    """A webhook URL pdfqueue will not call (HTTP 422): not https, or an address that is
    private, loopback, link-local or otherwise not public (cloud metadata included)."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"callback_url {url[:200]!r} is refused: {why}")
        self.why = why


class NotAZipArchive(PermanentError):
    def __init__(self, detail: str) -> None:
        super().__init__(f"the upload is not a ZIP archive: {detail}")


class ArchiveTooLarge(PermanentError):
    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the upload exceeds the limit of {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class ArchiveRejected(PermanentError):
    """The ZIP as a whole breaks a safety limit (too many members, too much data)."""


class DirectoryTooLarge(ArchiveRejected):
    """The ZIP declares or holds more entries, or a bigger central directory, than allowed
    (HTTP 413): refused before anything is built per entry."""


class InvalidCursor(PermanentError):
    """A pagination cursor this API did not hand out (HTTP 400)."""

    def __init__(self) -> None:
        super().__init__("invalid cursor: pass back the next_cursor of a previous page")


class SourceOutsideBucket(PermanentError):
    def __init__(self, source: str, bucket: str) -> None:
        super().__init__(f"source {source!r} is not inside the configured bucket {bucket!r}")
        self.source = source


class QuotaExceeded(PdfQueueError):
    """A tenant used up one of its quotas (HTTP 429); a retry after `retry_after_s` may pass."""

    def __init__(self, quota: str, limit: int, retry_after_s: int) -> None:
        super().__init__(f"quota {quota} ({limit}) is used up; retry in {retry_after_s} s")
        self.quota = quota
        self.limit = limit
        self.retry_after_s = retry_after_s


class UnsafeSource(PermanentError):
    """A source path that could name another object than it seems to (`..`, `%2f`, ...)."""

    def __init__(self, source: str, why: str) -> None:
        super().__init__(f"source {source[:200]!r} is refused: {why}")
        self.source = source


class ServiceUnavailable(TransientError):
    """Redis, PostgreSQL or storage did not answer in time."""

    def __init__(self, service: str, detail: str) -> None:
        super().__init__(f"{service} is unavailable: {detail}")
        self.service = service


class StorageError(TransientError):
    """The object store failed in a way that may pass (5xx, timeout, connection reset)."""


class ObjectNotFound(PermanentError):
    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} not found")
        self.key = key


_REASONS: tuple[tuple[tuple[str, ...], tuple[type[BaseException], ...], str], ...] = (
    # (modules the exception comes from, exception types, reason)
    (("botocore", "boto3"), (StorageError,), "storage_unavailable"),
    # a missing table or column, or no privilege: a deployment to fix, not an outage
    ((), (SyntaxOrAccessError,), "database_schema_error"),
    (("asyncpg",), (), "database_unavailable"),
    (("redis",), (), "redis_unavailable"),
    ((), (TimeoutError,), "timeout"),
    ((), (OSError,), "network_error"),
)


def transient_reason(exc: BaseException) -> str:
    """A short, bounded reason for an error worth retrying (for reports and metric labels)."""
    if isinstance(exc, ServiceUnavailable):
        return f"{exc.service}_unavailable"
    module = type(exc).__module__
    for modules, types, reason in _REASONS:
        if module.startswith(modules) or isinstance(exc, types):
            return reason
    return "internal_error"
