"""What an S3 error answer means for pdfqueue: by its HTTP status and error code, once."""

from __future__ import annotations

import re

from botocore.exceptions import (
    BotoCoreError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
)

from pdfqueue.domain.errors import (
    CertificateRejected,
    DependencyMisconfigured,
    EncryptionRefused,
    ObjectNotFound,
    PdfQueueError,
    StorageError,
    StorageRejected,
)
from pdfqueue.stores.driver_errors import tls_failure

NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
"""A missing object (a HEAD answers a bare 404, without a body to carry a code)."""
NO_BUCKET_CODES = frozenset({"NoSuchBucket"})
TRANSIENT_STATUS = frozenset({500, 502, 503, 504})
TRANSIENT_CODES = frozenset(
    {"RequestTimeout", "RequestTimeoutException", "OperationAborted", "InternalError"}
    | {"BadDigest", "XAmzContentSHA256Mismatch"}
)
"""Codes of a request worth sending again whatever the status says: S3 answers a request
whose body came too slowly with 400 RequestTimeout, a conflicting bucket operation with 409,
and a body that does not match the digest it was signed with (changed on the way) with 400."""
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
    }
)
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidSecurity",
        "InvalidToken",
        "NotSignedUp",
        "RequestTimeTooSkewed",  # the node's clock: a deployment to fix too
        "SignatureDoesNotMatch",
        "TokenRefreshRequired",
    }
)
"""Credentials, their permissions or the clock: what an operator fixes, not an outage."""


_CODE = re.compile(r"[A-Za-z][A-Za-z0-9.:]{0,63}")
"""An error code as S3 and its peers spell them: `NoSuchKey`, `KMS.NotFoundException`,
MinIO's `kms:KeyNotFound`."""


def error_code(raw: str, status: int) -> str:
    """The S3 error code as a bounded label (it reaches messages, logs and the batch's
    error): the code when it is one (letters, digits, `.` and `:`), else the HTTP status."""
    return raw if _CODE.fullmatch(raw) else str(status)


def is_kms(code: str) -> bool:
    """A refusal of the KMS key that SSE-KMS asked for (missing, disabled, not allowed)."""
    return code.lower().startswith("kms")


def is_throttled(status: int, code: str) -> bool:
    return status == 429 or code in THROTTLING_CODES


def is_transient(status: int, code: str) -> bool:
    """An answer a later try may turn into a success (5xx, throttling, a timed-out request)."""
    return is_throttled(status, code) or status in TRANSIENT_STATUS or code in TRANSIENT_CODES


def s3_error(status: int, code: str, key: str | None, what: str) -> PdfQueueError:
    """The pdfqueue error for an S3 error answer to the request `what` (on `key` if any):
    a refused KMS key as EncryptionRefused (MinIO answers a missing one 404, which must not
    read as a missing object), else as `_by_status` types it."""
    if is_kms(code) and "thrott" not in code.lower():
        return EncryptionRefused("aws:kms", f"S3 {code} (HTTP {status}) on {what}")
    return _by_status(status, code, key, what)


def _by_status(status: int, code: str, key: str | None, what: str) -> PdfQueueError:
    """Transient (5xx, 408, throttling) as StorageError; 401/403 and a missing bucket as
    DependencyMisconfigured; a missing object as ObjectNotFound; any other 4xx (400, 411,
    413, 416 ...) as StorageRejected, permanent."""
    if is_transient(status, code) or status == 408:
        return StorageError(f"S3 {code}: {what}: HTTP {status}")
    if status in (401, 403) or code in ACCESS_CODES:
        return DependencyMisconfigured("storage", f"S3 {code} (HTTP {status}) on {what}")
    if code in NO_BUCKET_CODES or (status == 404 and key is None):
        return DependencyMisconfigured("storage", f"S3 {code}: the bucket does not exist")
    if code in NOT_FOUND_CODES or status == 404:
        return ObjectNotFound(key or "")
    if 400 <= status < 500:
        return StorageRejected(status, code)
    return StorageError(f"S3 {code}: {what}: HTTP {status}")  # 3xx and the unexpected


def botocore_error(exc: BotoCoreError) -> PdfQueueError:
    """botocore's own errors: missing credentials or region are a configuration to fix, a
    parameter it refuses to send is permanent, the rest (connect, read, SSL) transient."""
    name = type(exc).__name__
    if (tls := tls_failure(exc)) is not None:
        return CertificateRejected("S3", tls)
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError, NoRegionError)):
        return DependencyMisconfigured("storage", name)
    if isinstance(exc, ParamValidationError):
        return StorageRejected(0, name)
    return StorageError(f"S3 unreachable: {exc}")
