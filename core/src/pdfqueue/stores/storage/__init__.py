"""Object storage: S3 through boto3, or a local folder, behind one small async interface.

The backends live in `s3` and `local`; for S3 the per-PDF calls (ranged GET, PUT, DELETE)
skip boto3 and the thread pool: see `pdfqueue.stores.storage.s3http`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from pdfqueue.domain.errors import SourceOutsideBucket, UnsafeSource
from pdfqueue.domain.settings import Settings
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
        if self._s3 is not None:
            await self._s3.put(key, data, sha256, tenant)
        else:
            await self.run(self.backend.put, key, data, tenant)

    async def delete(self, key: str) -> None:
        if self._s3 is not None:
            await self._s3.delete(key)
        else:
            await self.run(self.backend.delete, key)

    async def exists(self, key: str) -> bool:
        return await self.run(self.backend.exists, key)

    async def begin_upload(self, key: str, *, tenant: str | None = None) -> UploadSink:
        return await self.run(self.backend.begin_upload, key, tenant)

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
