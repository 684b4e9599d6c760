"""Streaming an upload into storage part by part: a 2 GB ZIP never sits in memory."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NoReturn

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from pdfqueue.domain.errors import ArchiveTooLarge, BodyTooSlow, MalformedRequest, NotAZipArchive
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage import Storage
from pdfqueue.stores.storage.zipdir import DirectoryLimits, count_entries

log = logging.getLogger(__name__)
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a first member, or an empty archive
ZIP_TYPES = {"application/zip", "application/x-zip-compressed", "application/octet-stream"}


MAX_NAME_CHARS = 200
BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-]")
"""A multipart boundary as RFC 2046 allows it: 1 to 70 of these characters, not ending in a
space. Every browser and HTTP library stays inside it; python-multipart alone would take
up to 256 bytes of anything, and refuse more where no handler maps it."""
"""The uploaded file's name is display-only: longer names are cut."""


def display_name(raw: str | None) -> str | None:
    """The uploaded file's name fit for display: its last path part, without control or
    format characters (newlines, bidi overrides), at most MAX_NAME_CHARS; None if empty."""
    if not raw:
        return None
    last = raw.replace("\\", "/").rsplit("/", maxsplit=1)[-1]
    kept = "".join(c for c in last if not unicodedata.category(c).startswith("C"))
    return kept.strip()[:MAX_NAME_CHARS].strip() or None


@dataclass(frozen=True)
class BodyPace:
    """How slowly an upload's body may arrive: within every `window_s` seconds the API spends
    waiting for it, at least `window_bytes` bytes. Without it a client that stops sending,
    or sends a byte a minute, holds its upload slot, a pending multipart upload, the part
    buffer and a connection for as long as it keeps the socket open. The HTTP protocol
    (`pdfqueue_api.protocol`) holds every body to the same pace over windows twice as long
    while the app answers: `paced`, on the upload's own reads, counts only the waits for the
    client and answers first, with its detail."""

    window_s: float
    min_bytes_per_s: int

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyPace:
        return cls(settings.http_body_timeout_s, settings.http_body_min_bytes_per_s)

    @property
    def window_bytes(self) -> int:
        """Bytes each window must bring: at least one, so a pause of `window_s` always ends it."""
        return max(1, math.ceil(self.window_s * self.min_bytes_per_s))

    def too_slow(self, received: int) -> BodyTooSlow:
        if received == 0:
            detail = f"no byte of the request body arrived for {self.window_s:g} s"
        else:
            detail = (
                f"the request body arrived too slowly: {received} bytes in {self.window_s:g} s,"
                f" under {self.min_bytes_per_s} bytes per second"
            )
        return BodyTooSlow(detail)


async def paced(body: AsyncIterator[bytes], pace: BodyPace) -> AsyncIterator[bytes]:
    """Pass `body` on; BodyTooSlow (408) once `pace.window_s` seconds of waiting for it have
    brought fewer than `pace.window_bytes` bytes. Only the waits count: while the consumer
    stores a part, the client is held back by TCP, not slow. A window that has brought its
    bytes starts the next one."""
    chunks = aiter(body)
    waited_s, received = 0.0, 0
    while True:
        started = time.monotonic()
        try:
            async with asyncio.timeout(pace.window_s - waited_s):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            log.info("an upload body was cut off: %d bytes in %g s", received, pace.window_s)
            raise pace.too_slow(received) from None
        waited_s += time.monotonic() - started
        received += len(chunk)
        if received >= pace.window_bytes:
            waited_s, received = 0.0, 0
        yield chunk


class FormFileReader:
    """Pulls the bytes of the `file` field out of a multipart body as they arrive."""

    def __init__(self, content_type: str) -> None:
        boundary = multipart_boundary(content_type)
        self.pending = bytearray()
        self.in_file = False
        self.seen_file = False
        self.filename: str | None = None
        """The file field's `filename`, as the client sent it (unsanitised)."""
        self._header_name = b""
        self._header_value = b""
        self._disposition: bytes | None = None
        self.parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._begin,
                "on_header_field": self._field,
                "on_header_value": self._value,
                "on_header_end": self._header_end,
                "on_headers_finished": self._headers_done,
                "on_part_data": self._data,
                "on_part_end": self._end,
            },
        )

    def _begin(self) -> None:
        self._disposition = None

    def _field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            if self._disposition is not None:
                _malformed("a multipart part has two Content-Disposition headers")
            self._disposition = self._header_value
        self._header_name, self._header_value = b"", b""

    def _headers_done(self) -> None:
        """RFC 7578: every part says `Content-Disposition: form-data; name=...`; one part
        named `file` is the upload (a second one would make the upload ambiguous)."""
        if self._disposition is None:
            _malformed("a multipart part has no Content-Disposition header")
        kind, params = parse_options_header(self._disposition)
        if kind != b"form-data":
            _malformed("a multipart part's Content-Disposition is not form-data")
        if not params.get(b"name"):
            _malformed("a multipart part has no name")
        self.in_file = params[b"name"] == b"file"
        if self.in_file and self.seen_file:
            _malformed("the multipart body has more than one field named 'file'")
        self.seen_file = self.seen_file or self.in_file
        if self.in_file and b"filename" in params:
            self.filename = params[b"filename"].decode("utf-8", errors="replace")

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self.in_file:
            self.pending += data[start:end]

    def _end(self) -> None:
        self.in_file = False

    async def file_chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for chunk in body:
            self._write(chunk)
            if self.pending:
                yield bytes(self.pending)
                self.pending.clear()
        self._write(None)
        if not self.seen_file:
            msg = "the multipart body has no field named 'file'"
            raise NotAZipArchive(msg)

    def _write(self, chunk: bytes | None) -> None:
        """Feed the parser (None: the body ended); a malformed body is bad input, a 422."""
        try:
            if chunk is None:
                self.parser.finalize()
            else:
                self.parser.write(chunk)
        except FormParserError as exc:  # the root of python-multipart's parse errors
            _malformed("the multipart body is malformed", exc)
        # python-multipart's finalize does not check that the body ended (its own TODO)
        if chunk is None and self.parser.state != MultipartState.END:
            _malformed("the multipart body is truncated (no closing boundary)")


def multipart_boundary(content_type: str) -> bytes:
    """The boundary of a multipart Content-Type; MalformedRequest (400) when it has none or
    one RFC 2046 does not allow."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        msg = "multipart/form-data without a boundary"
        raise MalformedRequest(msg)
    if not BOUNDARY.fullmatch(boundary.decode("latin-1")):
        msg = "the multipart boundary is not 1 to 70 characters RFC 2046 allows"
        raise MalformedRequest(msg)
    return boundary


def _malformed(detail: str, cause: Exception | None = None) -> NoReturn:
    """A multipart body framed wrong is bad input: 422, and nothing of it is kept."""
    raise NotAZipArchive(detail) from cause


async def store_upload(
    storage: Storage,
    key: str,
    chunks: AsyncIterator[bytes],
    *,
    tenant: str,
    max_bytes: int,
    part_bytes: int,
    directory_limits: DirectoryLimits,
) -> int:
    """Write `chunks` to `key` in parts (encrypted with `tenant`'s key where tenants have
    their own); nothing stays behind if anything goes wrong."""
    sink = await storage.begin_upload(key, tenant=tenant)
    buffer = bytearray()
    size = 0
    try:
        async for chunk in chunks:
            if size < 4 <= size + len(chunk):  # the first part is still whole in `buffer`
                _check_magic(bytes(buffer + chunk[:4]))
            size += len(chunk)
            if size > max_bytes:
                raise ArchiveTooLarge(max_bytes)
            buffer += chunk
            while len(buffer) >= part_bytes:
                await storage.run(sink.write_part, bytes(buffer[:part_bytes]))
                del buffer[:part_bytes]
        if size < 4:
            msg = "the body is empty" if size == 0 else "it is too short"
            raise NotAZipArchive(msg)
        await storage.run(sink.write_part, bytes(buffer))
        await storage.run(sink.complete)
    except BaseException:
        await storage.run(sink.abort)
        raise
    try:  # a fake, truncated or oversized ZIP gets its 413/422 now, not a failed batch later
        await storage.run(count_entries, storage.backend, key, directory_limits)
    except BaseException:
        await storage.delete(key)
        raise
    return size


def _check_magic(head: bytes) -> None:
    if head[:4] not in ZIP_MAGIC:
        msg = "it does not start with a ZIP signature"
        raise NotAZipArchive(msg)
