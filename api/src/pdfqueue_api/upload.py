"""Streaming an upload into storage part by part: a 2 GB ZIP never sits in memory."""

from __future__ import annotations

import unicodedata
from collections.abc import AsyncIterator

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from pdfqueue.domain.errors import ArchiveTooLarge, NotAZipArchive, UnsupportedMediaType
from pdfqueue.stores.storage import Storage
from pdfqueue.stores.zipdir import DirectoryLimits, count_entries

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a first member, or an empty archive
ZIP_TYPES = {"application/zip", "application/x-zip-compressed", "application/octet-stream"}


MAX_NAME_CHARS = 200
"""The uploaded file's name is display-only: longer names are cut."""


def display_name(raw: str | None) -> str | None:
    """The uploaded file's name fit for display: its last path part, without control or
    format characters (newlines, bidi overrides), at most MAX_NAME_CHARS; None if empty."""
    if not raw:
        return None
    last = raw.replace("\\", "/").rsplit("/", maxsplit=1)[-1]
    kept = "".join(c for c in last if not unicodedata.category(c).startswith("C"))
    return kept.strip()[:MAX_NAME_CHARS].strip() or None


class FormFileReader:
    """Pulls the bytes of the `file` field out of a multipart body as they arrive."""

    def __init__(self, content_type: str) -> None:
        _, params = parse_options_header(content_type)
        boundary = params.get(b"boundary")
        if not boundary:
            msg = "multipart/form-data without a boundary"
            raise UnsupportedMediaType(msg)
        self.pending = bytearray()
        self.in_file = False
        self.seen_file = False
        self.filename: str | None = None
        """The file field's `filename`, as the client sent it (unsanitised)."""
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
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
        self._disposition = b""

    def _field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name, self._header_value = b"", b""

    def _headers_done(self) -> None:
        _, params = parse_options_header(self._disposition)
        self.in_file = params.get(b"name") == b"file" and not self.seen_file
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
            msg = "the multipart body is malformed"
            raise NotAZipArchive(msg) from exc


async def store_upload(
    storage: Storage,
    key: str,
    chunks: AsyncIterator[bytes],
    *,
    max_bytes: int,
    part_bytes: int,
    directory_limits: DirectoryLimits,
) -> int:
    """Write `chunks` to `key` in parts; nothing stays behind if anything goes wrong."""
    sink = await storage.begin_upload(key)
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
