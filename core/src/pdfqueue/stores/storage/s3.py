"""The S3 backend: any S3-compatible store through boto3, keys relative to a prefix."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pdfqueue.domain.errors import (
    DependencyMisconfigured,
    EncryptionRefused,
    ObjectNotFound,
    PdfQueueError,
    StorageError,
)
from pdfqueue.domain.keys import UPLOADS_PREFIX
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage.encryption import Encryption
from pdfqueue.stores.storage.expiry import NO_LIFECYCLE_CODES, with_uploads_rule
from pdfqueue.stores.storage.s3errors import botocore_error, error_code, s3_error

PROBE_KEY = ".pdfqueue/encryption-probe"
"""The object `probe_encryption` writes, reads the encryption of and deletes (under the
prefix; no batch or user key starts with a dot)."""

if TYPE_CHECKING:
    from pdfqueue.stores.storage import UploadSink

T = TypeVar("T")


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str

    @classmethod
    def from_url(cls, url: str) -> S3Location:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            msg = f"{url!r} is not an s3://bucket/prefix URL"
            raise ValueError(msg)
        prefix = parsed.path.strip("/")
        return cls(parsed.netloc, f"{prefix}/" if prefix else "")


def client_error(exc: ClientError, key: str | None, what: str) -> PdfQueueError:
    """boto3's error answer as `s3_error` types it (by HTTP status and S3 error code)."""
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    code = error_code(str(exc.response.get("Error", {}).get("Code", "")), status)
    return s3_error(status, code, key, what)


class S3Backend:
    """Any S3-compatible store; keys are relative to the configured prefix."""

    def __init__(self, settings: Settings, *, max_connections: int = 32) -> None:
        self.location = S3Location.from_url(settings.storage_url)
        config = Config(
            connect_timeout=2,
            read_timeout=15,
            retries={"mode": "standard", "max_attempts": 3},
            max_pool_connections=max_connections,
            s3={"addressing_style": "path" if settings.s3_path_style else "auto"},
            # botocore >= 1.36 computes and checks CRC checksums on every PUT and GET; that is
            # CPU on the per-PDF path, and some S3-compatible stores reject the headers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self.ca_file = settings.s3_ca_file
        """CA certificates an https endpoint's certificate must chain to (None: the system's)."""
        self.client: Any = boto3.client(
            "s3", endpoint_url=settings.s3_endpoint_url, config=config, verify=self.ca_file
        )
        self.create_bucket_allowed = settings.s3_create_bucket
        self.encryption = Encryption.of(settings)

    def _key(self, key: str) -> str:
        return self.location.prefix + key

    def _call(self, fn: Callable[..., T], key: str | None = None, **kwargs: Any) -> T:
        try:
            return fn(Bucket=self.location.bucket, **kwargs)
        except ClientError as exc:
            raise client_error(exc, key, getattr(fn, "__name__", "request")) from exc
        except BotoCoreError as exc:
            raise botocore_error(exc) from exc

    def describe(self) -> str:
        return f"s3://{self.location.bucket}/{self.location.prefix}"

    def check(self) -> None:
        self._call(self.client.head_bucket)

    def ensure_bucket(self) -> bool:
        try:
            self.check()
        except (StorageError, DependencyMisconfigured):  # a missing bucket is the latter
            if not self.create_bucket_allowed:
                raise
            self._call(self.client.create_bucket)
            return True
        return False

    def expire_uploads(self, days: int) -> bool:
        """Set the bucket's uploads expiry rule, keeping its other rules; False when the store
        has no lifecycle support (it answers NotImplemented)."""
        try:
            current = self.client.get_bucket_lifecycle_configuration(Bucket=self.location.bucket)
            rules: list[dict[str, Any]] = current.get("Rules", [])
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in NO_LIFECYCLE_CODES:
                return False
            if code != "NoSuchLifecycleConfiguration":
                raise client_error(exc, None, "reading the lifecycle rules") from exc
            rules = []
        except BotoCoreError as exc:
            raise botocore_error(exc) from exc
        rules = with_uploads_rule(rules, self.location.prefix + UPLOADS_PREFIX, days)
        self._call(
            self.client.put_bucket_lifecycle_configuration,
            LifecycleConfiguration={"Rules": rules},
        )
        return True

    def size(self, key: str) -> int:
        head = self._call(self.client.head_object, key, Key=self._key(key))
        return int(head["ContentLength"])

    def read_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        end = start + length - 1
        obj = self._call(
            self.client.get_object, key, Key=self._key(key), Range=f"bytes={start}-{end}"
        )
        body: bytes = obj["Body"].read()
        return body

    def put(self, key: str, data: bytes, tenant: str | None = None) -> None:
        """Store `data`, encrypted as configured (with `tenant`'s KMS key if it has one)."""
        answer = self._call(
            self.client.put_object,
            key,
            Key=self._key(key),
            Body=data,
            ContentType="application/pdf",
            **self.encryption.request_args(tenant),
        )
        self.encryption.require(answer.get("ServerSideEncryption"), key)

    def encryption_of(self, key: str) -> str | None:
        """The server-side encryption S3 says `key` is stored with (a HEAD)."""
        head = self._call(self.client.head_object, key, Key=self._key(key))
        answered: str | None = head.get("ServerSideEncryption")
        return answered

    def probe_encryption(self) -> None:
        """Write, check and delete one small object with each key in use; EncryptionRefused
        naming the key when the store does not encrypt it or refuses the key (other errors,
        an outage or credentials, are the process's to wait for, as at any other start)."""
        for tenant in self.encryption.probes():
            key = self.encryption.key_for(tenant)
            named = f"KMS key {key}" if key else "the default key"
            whose = f" (tenant {tenant})" if tenant else ""
            try:
                self.put(PROBE_KEY, b"pdfqueue encryption probe", tenant)
                self.encryption.require(self.encryption_of(PROBE_KEY), PROBE_KEY)
            except EncryptionRefused as exc:
                raise EncryptionRefused(exc.asked, f"{named}{whose}: {exc.why}") from exc
            finally:
                with contextlib.suppress(PdfQueueError):  # nothing written, or the next probe
                    self.delete(PROBE_KEY)

    def delete(self, key: str) -> None:
        self._call(self.client.delete_object, key, Key=self._key(key))

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectNotFound:
            return False
        return True

    def begin_upload(self, key: str, tenant: str | None = None) -> UploadSink:
        return _S3Upload(self, key, tenant)


class _S3Upload:
    """A multipart upload: parts stream straight to S3, so memory holds one part at most."""

    def __init__(self, backend: S3Backend, key: str, tenant: str | None) -> None:
        self.backend = backend
        self.relative_key = key
        self.key = full_key = backend._key(key)
        created = backend._call(
            backend.client.create_multipart_upload,
            full_key,
            Key=full_key,
            **backend.encryption.request_args(tenant),
        )
        self.upload_id: str = created["UploadId"]
        self.parts: list[dict[str, Any]] = []

    def write_part(self, data: bytes) -> None:
        number = len(self.parts) + 1
        part = self.backend._call(
            self.backend.client.upload_part,
            self.key,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=data,
        )
        self.parts.append({"ETag": part["ETag"], "PartNumber": number})

    def complete(self) -> None:
        self.backend._call(
            self.backend.client.complete_multipart_upload,
            self.key,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.parts},
        )
        encryption = self.backend.encryption
        if encryption.algorithm is not None:  # not every store repeats it in this answer
            encryption.require(self.backend.encryption_of(self.relative_key), self.relative_key)

    def abort(self) -> None:
        self.backend._call(
            self.backend.client.abort_multipart_upload,
            self.key,
            Key=self.key,
            UploadId=self.upload_id,
        )
