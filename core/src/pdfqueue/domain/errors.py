"""Errors pdfqueue raises; the type says whether retrying can help and which HTTP status
answers it. Stores translate their drivers' errors into these at their edge."""

from __future__ import annotations

from typing import ClassVar


class PdfQueueError(Exception):
    """Root of every pdfqueue error."""

    http_status: ClassVar[int] = 500

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer to this error carries."""
        return {}

    def public_detail(self) -> str:
        """What a client is told: never an address, a path or a driver's message."""
        return str(self)


class PermanentError(PdfQueueError):
    """Bad input: retrying cannot help (HTTP 4xx, kopf.PermanentError, no arq retry)."""

    http_status = 400
    reason: str = "rejected"
    """Bounded label of this kind of refusal: a batch it fails carries it as its `reason`."""


class TransientError(PdfQueueError):
    """A dependency is flaky or down: retry later with backoff."""

    http_status = 503
    reason: ClassVar[str] = "dependency_error"
    """Bounded label of this kind of failure (per-file reasons, metric labels)."""


class FileRejected(PermanentError):
    """One file of a batch cannot be read; it fails with `reason` (the per-file reason in the
    report) and the rest of the batch goes on."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


class ConfigurationError(PdfQueueError):
    """Settings a process cannot run with; it says which and refuses to start."""


class BatchNotFound(PermanentError):
    http_status = 404

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"batch {batch_id} not found")
        self.batch_id = batch_id


class InvalidBatchId(PermanentError):
    """Not a batch id (32 lowercase hex digits): refused before it reaches a key or a query."""

    http_status = 422

    def __init__(self, value: str) -> None:
        super().__init__(f"{value[:40]!r} is not a batch id (32 lowercase hex digits)")


class BatchConflict(PermanentError):
    """The batch exists already with another tenant, source or object: it is not yours."""

    http_status = 409

    def __init__(self, batch_id: str) -> None:
        super().__init__(f"batch {batch_id} exists already and belongs to something else")
        self.batch_id = batch_id


class BatchNotRetryable(PermanentError):
    """The batch cannot be retried now (HTTP 409): not completed yet, or nothing to re-run."""

    http_status = 409

    def __init__(self, batch_id: str, why: str) -> None:
        super().__init__(f"batch {batch_id} cannot be retried: {why}")
        self.batch_id = batch_id
        self.why = why


class UnsafeCallback(PermanentError):
    """A webhook URL pdfqueue will not call (HTTP 422): not https, or an address that is
    private, loopback, link-local or otherwise not public (cloud metadata included)."""

    http_status = 422

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"callback_url {url[:200]!r} is refused: {why}")
        self.why = why


class CallbackUnresolved(UnsafeCallback):
    """The callback's host does not resolve (now): refused at upload (422) like any unsafe
    URL, but at delivery it is tried again, since a name server may be down for a while."""

    def __init__(self, url: str) -> None:
        super().__init__(url, "its host does not resolve")


class NotAZipArchive(PermanentError):
    http_status = 422
    reason = "not_a_zip"

    def __init__(self, detail: str) -> None:
        super().__init__(f"the upload is not a ZIP archive: {detail}")


class ArchiveTooLarge(PermanentError):
    http_status = 413

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(
            f"the upload exceeds the limit of {limit_bytes} bytes (PDFQUEUE_MAX_UPLOAD_BYTES):"
            " split it into smaller ZIPs"
        )
        self.limit_bytes = limit_bytes


class ArchiveRejected(PermanentError):
    """The ZIP as a whole breaks a safety limit (too much data, overlapping members)."""

    reason = "archive_rejected"


class DirectoryTooLarge(ArchiveRejected):
    """The ZIP declares or holds more entries, or a bigger central directory, than allowed
    (HTTP 413): refused before anything is built per entry."""

    http_status = 413
    reason = "too_many_members"


class InvalidCursor(PermanentError):
    """A pagination cursor this API did not hand out (HTTP 400)."""

    def __init__(self) -> None:
        super().__init__("invalid cursor: pass back the next_cursor of a previous page")


class InvalidDuration(PermanentError):
    """Not a duration pdfqueue reads (`30d`, `12h`, `15m`, `0s`)."""

    http_status = 422

    def __init__(self, value: str) -> None:
        super().__init__(f"{value[:40]!r} is not a duration: write a whole number and s, m, h or d")


class SourceOutsideBucket(PermanentError):
    def __init__(self, source: str, bucket: str) -> None:
        super().__init__(f"source {source!r} is not inside the configured bucket {bucket!r}")
        self.source = source


class QuotaExceeded(PdfQueueError):
    """A tenant used up one of its quotas (HTTP 429); a retry after `retry_after_s` may pass."""

    http_status = 429

    def __init__(self, quota: str, limit: int, retry_after_s: int) -> None:
        super().__init__(f"quota {quota} ({limit}) is used up; retry in {retry_after_s} s")
        self.quota = quota
        self.limit = limit
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class UnsafeSource(PermanentError):
    """A source path that could name another object than it seems to (`..`, `%2f`, ...)."""

    def __init__(self, source: str, why: str) -> None:
        super().__init__(f"source {source[:200]!r} is refused: {why}")
        self.source = source


class UnsupportedMediaType(PermanentError):
    """The body is neither multipart/form-data nor a raw ZIP."""

    http_status = 415


class MalformedRequest(PermanentError):
    """A request whose framing is broken before its body could be read (HTTP 400): a
    Content-Length that is not a number, a multipart Content-Type without a valid
    boundary."""


class BodyTooSlow(PermanentError):
    """The upload's body stalled, or trickled below the minimum rate (HTTP 408): the partial
    upload is removed and the connection closed (the rest of the body is never read)."""

    http_status = 408

    def headers(self) -> dict[str, str]:
        return {"Connection": "close"}


class UploadAborted(PdfQueueError):
    """The client went away mid-upload; the partial upload is removed (nobody reads the
    answer: 499, nginx's "client closed request")."""

    http_status = 499

    def __init__(self) -> None:
        super().__init__("the client disconnected mid-upload")


class ServiceUnavailable(TransientError):
    """A dependency did not answer in time, or refused more work (`service` says which)."""

    reason = "service_unavailable"

    def __init__(self, service: str, detail: str) -> None:
        super().__init__(f"{service} is unavailable: {detail}")
        self.service = service


class StoreNearlyFull(ServiceUnavailable):
    """A store is close to refusing work, or refuses writes, while it still answers every
    health check: new uploads and retries wait (503, Retry-After), so that the batches already
    admitted keep the room they need to finish. `/readyz` says so and stays ready (reads
    still work)."""

    retry_after_s = 30

    def __init__(self, service: str, used: str) -> None:
        super().__init__(
            service,
            f"{used}: new work waits until there is room (the batches already running go on)",
        )
        self.used = used

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class RedisNearlyFull(StoreNearlyFull):
    """Redis's used memory is past PDFQUEUE_REDIS_MEMORY_REFUSE_SHARE of its maxmemory: under
    noeviction a full Redis refuses every write, the counting of running batches included."""

    def __init__(self, share: float) -> None:
        super().__init__("redis", f"{share:.0%} of its maxmemory is used")
        self.share = share


class DatabaseNearlyFull(StoreNearlyFull):
    """PostgreSQL's client connections are past PDFQUEUE_DATABASE_CONNECTIONS_REFUSE_SHARE of
    those it allows: a worker the autoscaler adds for new work could not connect, nor could the
    host application, while the pools already open keep the running batches going."""

    def __init__(self, used: int, limit: int) -> None:
        super().__init__("postgresql", f"{used} of its {limit} connections are in use")
        self.share = used / limit if limit else 1.0


class StorageRefusingWrites(StoreNearlyFull):
    """The object store refused this process's last write for what the store is (a full
    disk, a quota, an outage past the retries, a permission taken away) and a probe write
    still is: an upload would be read in full and then lost. The running batches' PDFs are
    retried with backoff and go on once the store takes writes again."""

    def __init__(self, why: str) -> None:
        super().__init__("storage", f"writes are refused ({why})")
        self.why = why

    def public_detail(self) -> str:
        return "storage refuses writes: new work waits until it takes them again"


class RedisUnavailable(ServiceUnavailable):
    """Redis failed or did not answer (raised by the stores that talk to it)."""

    reason = "redis_unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__("redis", detail)


class DatabaseUnavailable(ServiceUnavailable):
    """PostgreSQL failed or did not answer (raised by the PostgreSQL stores only)."""

    reason = "database_unavailable"

    def __init__(self, detail: str) -> None:
        super().__init__("postgresql", detail)


class DatabaseSchemaError(TransientError):
    """A table or column is missing, or a privilege: a deployment to fix, not an outage;
    retried, as the fix may land while the job waits."""

    reason = "database_schema_error"


class UsersTableMisfit(DatabaseSchemaError):
    """The users table's columns are not of the types the users settings say (an id of
    another type than PDFQUEUE_USERS_ID_TYPE, a link column that is not text): the worker
    refuses to start, naming the column and the setting to change."""


class SchemaNotReady(TransientError):
    """The database's schema is older than this release needs, or too new for it: the process
    waits (not ready) until `pdfqueue migrate` has run, or the code is upgraded."""

    reason = "schema_not_ready"

    def __init__(self, detail: str, *, found: int, needed: int) -> None:
        super().__init__(detail)
        self.found = found
        self.needed = needed


class StorageError(TransientError):
    """The object store failed in a way that may pass (5xx, timeout, connection reset)."""

    reason = "storage_unavailable"

    def public_detail(self) -> str:
        return "storage is unavailable; retry later"  # the message names endpoint and key


class DependencyRejected(PermanentError):
    """A store refused one request for what it carried or asked: retrying cannot help. The
    request that sent it gets `http_status`; a file it was written for fails with `reason`
    (bounded: a per-file reason and a metric label). Never the driver's message or a value."""

    http_status = 500
    reason = "rejected"


class DatabaseRejected(DependencyRejected):
    """PostgreSQL refused a statement with an SQLSTATE that is no outage (a syntax error, a
    state or feature it refuses): a bug or a deployment to fix, not a retry."""

    reason = "database_rejected"
    refused: ClassVar[str] = "the statement"

    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"the database refused {self.refused} (SQLSTATE {sqlstate})")
        self.sqlstate = sqlstate


class InvalidData(DatabaseRejected):
    """PostgreSQL refused the data itself (SQLSTATE class 22 data, 23 integrity, 54 program
    limits): the request or the file that carried it is at fault (HTTP 422)."""

    http_status = 422
    reason = "invalid_data"
    refused = "the data"


class RedisRejected(DependencyRejected):
    """Redis refused a command for what it is (WRONGTYPE, a script's error, bad arguments):
    a bug or damaged state, which retrying does not cure."""

    reason = "redis_rejected"

    def __init__(self, detail: str) -> None:
        super().__init__(f"redis refused the command: {detail}")


class StorageRejected(DependencyRejected):
    """The object store refused a request with a 4xx that is neither a missing object nor
    bad credentials (400 bad request, 411, 413 too large, 416 range...): permanent."""

    reason = "storage_rejected"

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"the object store refused the request: HTTP {status} {code}")
        self.status = status
        self.code = code

    def public_detail(self) -> str:
        return "the object store refused the request"  # the message names no key, but be safe


class DependencyMisconfigured(ConfigurationError, TransientError):
    """A store refused pdfqueue's credentials or configuration (S3's 401/403 or a missing
    bucket, Redis's NOAUTH/NOPERM, PostgreSQL's class 28): an operator's fix, not an outage.
    Workers retry it like a schema error (the fix may land while a job waits); a process
    checking it at start refuses to start; the API answers 500 and says what to fix."""

    http_status = 500

    def __init__(self, service: str, detail: str) -> None:
        super().__init__(f"{service} refused pdfqueue's credentials or configuration: {detail}")
        self.service = service

    def public_detail(self) -> str:
        return f"{self.service} refused pdfqueue's credentials: the deployment needs fixing"


class CertificateRejected(DependencyMisconfigured):
    """A store's TLS certificate did not verify (a wrong or missing CA, an expired
    certificate, a host name it does not name) or the TLS handshake failed: a deployment to
    fix, named with the store and the reason at start, never retried as an outage."""

    def __init__(self, service: str, reason: str) -> None:
        ConfigurationError.__init__(
            self,
            f"{service}: TLS certificate not accepted: {reason} (check the store's CA file"
            " and that its URL names a host its certificate is for)",
        )
        self.service = service
        self.why = reason

    def public_detail(self) -> str:
        return f"{self.service}: TLS certificate not accepted: {self.why}"


class EncryptionRefused(DependencyMisconfigured):
    """The object store did not apply the server-side encryption pdfqueue asks for (it
    ignores the header, or its KMS key is missing, disabled or not pdfqueue's to use): a
    deployment to fix, found by the probe write at start and by every write's answer, so
    that nothing is stored in the clear while the settings say otherwise."""

    def __init__(self, asked: str, why: str) -> None:
        ConfigurationError.__init__(
            self,
            f"storage: server-side encryption {asked} not applied: {why} (check"
            " PDFQUEUE_S3_SSE, the KMS key and pdfqueue's permission to use it)",
        )
        self.service = "storage"
        self.asked = asked
        self.why = why

    def public_detail(self) -> str:
        return "storage: server-side encryption not applied: the deployment needs fixing"


class ObjectNotFound(PermanentError):
    http_status = 404
    reason = "upload_gone"

    def __init__(self, key: str) -> None:
        super().__init__(f"object {key!r} not found")
        self.key = key


UNTYPED_REASONS = ("timeout", "network_error", "internal_error")
"""Reasons of failures no store typed: a job's own deadline, a socket error, a bug."""


def _subclasses(cls: type[TransientError]) -> list[type[TransientError]]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def transient_reasons() -> tuple[str, ...]:
    """Every reason `transient_reason` can return, in a stable order."""
    typed = dict.fromkeys(c.reason for c in _subclasses(TransientError))
    return (*typed, *UNTYPED_REASONS)


def transient_reason(exc: BaseException) -> str:
    """A short, bounded reason for an error worth retrying (for reports and metric labels)."""
    if isinstance(exc, TransientError):
        return exc.reason
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, OSError):
        return "network_error"
    return "internal_error"


def is_transient(reason: str | None) -> bool:
    """A per-file failure reason a retry may cure: any transient reason (`<service>_unavailable`
    included) or a worker lost mid-job; the others (an unreadable PDF, no text) do not pass by
    trying again."""
    if reason is None:
        return False
    service, _, rest = reason.partition("_")
    unavailable = rest == "unavailable" and service.isalpha()
    return unavailable or reason == "worker_lost" or reason in transient_reasons()
