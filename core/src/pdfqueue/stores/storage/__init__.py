"""Object storage: S3 through boto3, or a local folder, behind one small async interface.

For S3 the per-PDF calls (ranged GET, PUT, DELETE) skip boto3 and the thread pool: see
`pdfqueue.stores.storage.s3http`.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from pdfqueue.domain.errors import (
    ObjectNotFound,
    SourceOutsideBucket,
    StorageError,
    UnsafeSource,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage.expiry import NO_LIFECYCLE_CODES, UPLOADS_PREFIX, with_uploads_rule
from pdfqueue.stores.storage.s3http import NOT_FOUND_CODES, AsyncS3

T = TypeVar("T")
_UNSAFE_SOURCE = re.compile(r"[\x00-\x1f\x7f-\x9f\\?#]|%(?:2f|5c|2e)", re.IGNORECASE)
"""Control characters, backslashes, `?`, `#` and percent-encoded `/`, `\\` or `.`: a store or
a proxy may read any of them as something else than the literal text the checks compared."""


class Backend(Protocol):
    """The blocking operations a store offers; `Storage` runs them off the event loop."""

    def describe(self) -> str: ...
    def check(self) -> None: ...
    def ensure_bucket(self) -> bool: ...
    def expire_uploads(self, days: int) -> bool: ...
    def size(self, key: str) -> int: ...
    def read_range(self, key: str, start: int, length: int) -> bytes: ...
    def put(self, key: str, data: bytes) -> None: ...
    def delete(self, key: str) -> None: ...
    def exists(self, key: str) -> bool: ...
    def begin_upload(self, key: str) -> UploadSink: ...


class UploadSink(Protocol):
    """A write-once object being streamed in; nothing is visible until `complete`."""

    def write_part(self, data: bytes) -> None: ...
    def complete(self) -> None: ...
    def abort(self) -> None: ...


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
        self.client: Any = boto3.client("s3", endpoint_url=settings.s3_endpoint_url, config=config)
        self.create_bucket_allowed = settings.s3_create_bucket

    def _key(self, key: str) -> str:
        return self.location.prefix + key

    def _call(self, fn: Callable[..., T], key: str | None = None, **kwargs: Any) -> T:
        try:
            return fn(Bucket=self.location.bucket, **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in NOT_FOUND_CODES and key is not None:
                raise ObjectNotFound(key) from exc
            raise StorageError(f"S3 {code or 'error'}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"S3 unreachable: {exc}") from exc

    def describe(self) -> str:
        return f"s3://{self.location.bucket}/{self.location.prefix}"

    def check(self) -> None:
        self._call(self.client.head_bucket)

    def ensure_bucket(self) -> bool:
        try:
            self.check()
        except StorageError:
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
                raise StorageError(f"S3 {code or 'error'} reading the lifecycle rules") from exc
            rules = []
        except BotoCoreError as exc:
            raise StorageError(f"S3 unreachable: {exc}") from exc
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

    def put(self, key: str, data: bytes) -> None:
        self._call(
            self.client.put_object,
            key,
            Key=self._key(key),
            Body=data,
            ContentType="application/pdf",
        )

    def delete(self, key: str) -> None:
        self._call(self.client.delete_object, key, Key=self._key(key))

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectNotFound:
            return False
        return True

    def begin_upload(self, key: str) -> UploadSink:
        return _S3Upload(self, self._key(key))


class _S3Upload:
    """A multipart upload: parts stream straight to S3, so memory holds one part at most."""

    def __init__(self, backend: S3Backend, full_key: str) -> None:
        self.backend = backend
        self.key = full_key
        created = backend._call(backend.client.create_multipart_upload, full_key, Key=full_key)
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

    def abort(self) -> None:
        self.backend._call(
            self.backend.client.abort_multipart_upload,
            self.key,
            Key=self.key,
            UploadId=self.upload_id,
        )


class FileBackend:
    """A folder on local disk: the embedded default for a laptop or a single machine."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            msg = f"key {key!r} escapes the storage folder"
            raise ValueError(msg)
        return path

    def describe(self) -> str:
        return f"file://{self.root}"

    def check(self) -> None:
        if not self.root.is_dir():
            raise StorageError(f"storage folder {self.root} does not exist")

    def ensure_bucket(self) -> bool:
        existed = self.root.is_dir()
        self.root.mkdir(parents=True, exist_ok=True)
        return not existed

    def expire_uploads(self, days: int) -> bool:
        """A folder has no lifecycle rules: uploads stay until a cleanup step removes them."""
        return False

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    def read_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with self._path(key).open("rb") as fh:
                fh.seek(start)
                return fh.read(length)
        except FileNotFoundError as exc:
            raise ObjectNotFound(key) from exc

    def put(self, key: str, data: bytes) -> None:
        sink = self.begin_upload(key)
        sink.write_part(data)
        sink.complete()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def begin_upload(self, key: str) -> UploadSink:
        return _FileUpload(self._path(key))


class _FileUpload:
    """Writes to a hidden temporary file and renames it into place on completion."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
        self.fh = self.tmp.open("wb")

    def write_part(self, data: bytes) -> None:
        self.fh.write(data)

    def complete(self) -> None:
        self.fh.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


class Storage:
    """Async facade: runs the backend's blocking calls on a dedicated thread pool.

    On S3, `read_range`, `put` and `delete` are native asyncio requests instead (`AsyncS3`).
    """

    def __init__(self, backend: Backend, *, threads: int = 32) -> None:
        self.backend = backend
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="storage")
        self._s3 = (
            AsyncS3(
                backend.client,
                backend.location.bucket,
                backend.location.prefix,
                connections=threads,
            )
            if isinstance(backend, S3Backend)
            else None
        )

    @classmethod
    def from_settings(cls, settings: Settings, *, threads: int = 32) -> Storage:
        url = settings.storage_url
        if url.startswith("s3://"):
            return cls(S3Backend(settings, max_connections=threads), threads=threads)
        if url.startswith("file://"):
            return cls(FileBackend(Path(url.removeprefix("file://") or ".")), threads=threads)
        msg = f"PDFQUEUE_STORAGE_URL {url!r} must start with s3:// or file://"
        raise ValueError(msg)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def check(self) -> None:
        await self.run(self.backend.check)

    async def ensure_bucket(self) -> bool:
        return await self.run(self.backend.ensure_bucket)

    async def expire_uploads(self, days: int) -> bool:
        return await self.run(self.backend.expire_uploads, days)

    async def size(self, key: str) -> int:
        return await self.run(self.backend.size, key)

    async def read_range(self, key: str, start: int, length: int) -> bytes:
        if self._s3 is not None:
            return await self._s3.read_range(key, start, length)
        return await self.run(self.backend.read_range, key, start, length)

    async def put(self, key: str, data: bytes) -> None:
        if self._s3 is not None:
            await self._s3.put(key, data)
        else:
            await self.run(self.backend.put, key, data)

    async def delete(self, key: str) -> None:
        if self._s3 is not None:
            await self._s3.delete(key)
        else:
            await self.run(self.backend.delete, key)

    async def exists(self, key: str) -> bool:
        return await self.run(self.backend.exists, key)

    async def begin_upload(self, key: str) -> UploadSink:
        return await self.run(self.backend.begin_upload, key)

    def url(self, key: str) -> str:
        return self.backend.describe().rstrip("/") + "/" + key

    def key_from_url(self, url: str) -> str:
        """The key of an `s3://` URL inside this store; anything else is refused."""
        if not isinstance(self.backend, S3Backend):
            # s3:// sources need PDFQUEUE_STORAGE_URL to be an s3:// store
            raise SourceOutsideBucket(url, self.backend.describe())
        here = self.backend.location
        try:
            bucket, segments = source_segments(url)
        except ValueError as exc:
            raise SourceOutsideBucket(url, here.bucket) from exc
        base = here.prefix.rstrip("/").split("/") if here.prefix else []
        if bucket != here.bucket or len(segments) <= len(base) or segments[: len(base)] != base:
            raise SourceOutsideBucket(url, f"{here.bucket}/{here.prefix}")
        return "/".join(segments[len(base) :])

    def close(self) -> None:
        """Stop the thread pool; inside an event loop prefer `aclose`, which does this too."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        """Close the S3 HTTP session (if a call opened one) and stop the thread pool."""
        if self._s3 is not None:
            await self._s3.aclose()
        self.close()


def source_segments(url: str) -> tuple[str, list[str]]:
    """The bucket and the key's path segments of an `s3://bucket/key` URL, checked.

    Raises ValueError for anything but such a URL, UnsafeSource for an ambiguous one.

    Prefixes are compared by segments, never as text, and a segment that a store could
    resolve (`.`, `..`, an empty one) or an encoding of a separator is refused outright:
    `s3://bucket/incoming/../uploads/x.zip` must not pass for a key under `incoming/`.
    """
    if _UNSAFE_SOURCE.search(url):
        raise UnsafeSource(url, "control characters, \\, ?, # and %2f, %5c, %2e are not allowed")
    parsed = urlsplit(url)  # not urlparse: it would cut a ";..." off the last segment
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.startswith("/"):
        msg = f"{url[:200]!r} is not an s3://bucket/key URL"
        raise ValueError(msg)
    segments = parsed.path[1:].split("/")
    if any(s in {"", ".", ".."} for s in segments):
        raise UnsafeSource(url, "empty, '.' and '..' path segments are not allowed")
    return parsed.netloc, segments


class RangeReader(io.RawIOBase):
    """A seekable read-only file over one stored object, fetching only the ranges read.

    `zipfile` reads a central directory with a handful of seeks and reads, so listing a
    ZIP of 50,000 members costs a few ranged GETs, not a download of the archive.
    """

    def __init__(self, backend: Backend, key: str) -> None:
        super().__init__()
        self.backend = backend
        self.key = key
        self.length = backend.size(key)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.length}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.length if size is None or size < 0 else min(self.length, self.pos + size)
        data = (
            self.backend.read_range(self.key, self.pos, end - self.pos) if end > self.pos else b""
        )
        self.pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
