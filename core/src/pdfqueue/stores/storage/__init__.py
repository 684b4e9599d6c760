"""Object storage: S3 through boto3, or a local folder, behind one small async interface.

The backends live in `s3` and `local`; for S3 the per-PDF calls (ranged GET, PUT, DELETE)
skip boto3 and the thread pool: see `pdfqueue.stores.storage.s3http`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from pdfqueue.domain.errors import (
    DependencyMisconfigured,
    SourceOutsideBucket,
    StorageError,
    UnsafeSource,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.stores.storage.local import FileBackend
from pdfqueue.stores.storage.s3 import S3Backend
from pdfqueue.stores.storage.s3http import AsyncS3

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
    def put(self, key: str, data: bytes, tenant: str | None = None) -> None: ...
    def delete(self, key: str) -> None: ...
    def exists(self, key: str) -> bool: ...
    def begin_upload(self, key: str, tenant: str | None = None) -> UploadSink: ...
    def probe_encryption(self) -> None: ...


class UploadSink(Protocol):
    """A write-once object being streamed in; nothing is visible until `complete`."""

    def write_part(self, data: bytes) -> None: ...
    def complete(self) -> None: ...
    def abort(self) -> None: ...


WRITE_PROBE_KEY = ".pdfqueue/write-probe"
"""What `probe_write` writes and deletes (under the prefix; no batch or user key starts with
a dot)."""
WRITE_PROBE_EVERY_S = 5.0
MAX_PROBE_BYTES = 16 * 1024**2


@dataclass
class WriteHealth:
    """Whether the store takes writes, as this process's last write found: refused from a
    write it refused for what the store is (an outage, a full disk, a quota, a permission)
    until one it takes. A refusal of one object's content (413, a digest) says nothing of the
    store and is not counted."""

    refused: str | None = None
    """Why the last write was refused (the error's message), None while writes go through."""
    refused_bytes: int = 0
    """The size of the write refused: a disk with a few KiB left takes a small probe, not the
    part that failed, so the probe writes as much (up to MAX_PROBE_BYTES)."""
    probed_at: float = float("-inf")

    def saw(self, failure: BaseException | None, size: int = 0) -> None:
        if failure is None:
            self.refused = None
            metrics.STORAGE_WRITABLE.set(1)
        elif isinstance(failure, (StorageError, DependencyMisconfigured)):
            self.refused, self.refused_bytes = str(failure), size
            metrics.STORAGE_WRITABLE.set(0)


class Storage:
    """Async facade: runs the backend's blocking calls on a dedicated thread pool.

    On S3, `read_range`, `put` and `delete` are native asyncio requests instead (`AsyncS3`).
    Every write's outcome is kept in `writes` (`WriteHealth`).
    """

    def __init__(self, backend: Backend, *, threads: int = 32) -> None:
        self.backend = backend
        self.writes = WriteHealth()
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="storage")
        self._s3 = (
            AsyncS3(
                backend.client,
                backend.location.bucket,
                backend.location.prefix,
                connections=threads,
                ca_file=backend.ca_file,
                encryption=backend.encryption,
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

    async def put(
        self, key: str, data: bytes, *, sha256: str | None = None, tenant: str | None = None
    ) -> None:
        """Store `data` under `key`; `sha256`, its hex digest when the caller has it (the
        S3 request signs it, and the server checks the body against it); `tenant`, whose
        KMS key encrypts it when tenants have keys of their own (`encryption.by_tenant`)."""
        try:
            if self._s3 is not None:
                await self._s3.put(key, data, sha256, tenant)
            else:
                await self.run(self.backend.put, key, data, tenant)
        except BaseException as exc:
            self.writes.saw(exc, len(data))
            raise
        self.writes.saw(None)

    async def probe_write(self) -> None:
        """When the last write was refused: write and delete an object of its size, at most
        every WRITE_PROBE_EVERY_S, so that a store that takes writes again is seen to (uploads
        are refused meanwhile and would never find out). Raises what the store answers."""
        now = time.monotonic()
        if self.writes.refused is None or now - self.writes.probed_at < WRITE_PROBE_EVERY_S:
            return
        self.writes.probed_at = now
        size = min(max(self.writes.refused_bytes, 1), MAX_PROBE_BYTES)
        await self.put(WRITE_PROBE_KEY, b"\0" * size)
        await self.delete(WRITE_PROBE_KEY)

    async def delete(self, key: str) -> None:
        if self._s3 is not None:
            await self._s3.delete(key)
        else:
            await self.run(self.backend.delete, key)

    async def exists(self, key: str) -> bool:
        return await self.run(self.backend.exists, key)

    async def begin_upload(self, key: str, *, tenant: str | None = None) -> UploadSink:
        try:
            sink = await self.run(self.backend.begin_upload, key, tenant)
        except BaseException as exc:
            self.writes.saw(exc)
            raise
        return _Watched(sink, self.writes)

    async def probe_encryption(self) -> None:
        """EncryptionRefused if the store does not encrypt as PDFQUEUE_S3_SSE asks (a probe
        object written, checked and deleted per key in use); nothing to do without it."""
        await self.run(self.backend.probe_encryption)

    @property
    def encrypts_by_tenant(self) -> bool:
        """Whether a write must name its tenant (tenants have KMS keys of their own)."""
        return isinstance(self.backend, S3Backend) and self.backend.encryption.by_tenant

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


@dataclass
class _Watched:
    """An upload whose parts' and completion's outcomes go to the store's `WriteHealth`."""

    sink: UploadSink
    writes: WriteHealth

    def write_part(self, data: bytes) -> None:
        self._watch(self.sink.write_part, data)

    def complete(self) -> None:
        self._watch(self.sink.complete)

    def abort(self) -> None:
        self.sink.abort()

    def _watch(self, call: Callable[..., None], *data: bytes) -> None:
        try:
            call(*data)
        except BaseException as exc:
            self.writes.saw(exc, sum(len(d) for d in data))
            raise
        self.writes.saw(None)


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
