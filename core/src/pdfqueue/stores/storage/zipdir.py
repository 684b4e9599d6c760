"""A stored ZIP's central directory, read by range within limits, one entry at a time.

Python's `zipfile` reads the whole central directory into memory and builds a `ZipInfo` for
every entry before anyone can count them: about 340 bytes per 51-byte entry, so a 100 MB
upload of empty entries costs gigabytes. Here the end records are read first and the archive
is refused when it declares more entries or a bigger directory than the limits allow; the
directory is then streamed in bounded ranged reads, and the walk stops at the entry limit
whatever the end record claimed. The API (upload validation) and the worker (ingest) both
read archives through this module only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdfqueue.domain.errors import DirectoryTooLarge, NotAZipArchive
from pdfqueue.domain.zip64 import apply_zip64

if TYPE_CHECKING:
    from pdfqueue.domain.settings import Settings
    from pdfqueue.stores.storage import Backend

# Record layouts and signatures (PKWARE APPNOTE 4.3), the same as `zipfile`'s.
_END = struct.Struct("<4s4H2LH")
_END_SIG = b"PK\x05\x06"
_LOCATOR = struct.Struct("<4sLQL")
_LOCATOR_SIG = b"PK\x06\x07"
_END64 = struct.Struct("<4sQ2H2L4Q")
_END64_SIG = b"PK\x06\x06"
_ENTRY = struct.Struct("<4s4B4HL2L5H2L")
_ENTRY_SIG = b"PK\x01\x02"
_MAX_COMMENT = 0xFFFF
_TAIL_BYTES = _END64.size + _LOCATOR.size + _END.size + _MAX_COMMENT
"""One ranged read of this many bytes at the end holds every end record there can be."""
READ_CHUNK_BYTES = 1024**2
"""Bytes of central directory read at once: what the walk holds, plus one entry at most."""
_UTF8_NAME = 0x800


@dataclass(frozen=True)
class DirectoryLimits:
    max_entries: int
    """Most entries (members, directories included) the archive may hold."""
    max_directory_bytes: int
    """Largest central directory, in bytes."""

    @classmethod
    def from_settings(cls, settings: Settings) -> DirectoryLimits:
        return cls(settings.max_members, settings.max_directory_bytes)


@dataclass(frozen=True)
class EndRecord:
    """What the end-of-central-directory records (ZIP64 ones included) declare."""

    entries: int
    directory_size: int
    directory_start: int
    """Where the directory really starts in the object: it ends where the end records begin."""
    shift: int
    """Bytes in front of the archive proper (a self-extractor's stub), added to every offset
    the archive declares; `zipfile` calls it `concat`."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One central directory entry: enough to classify a member and read it by range."""

    index: int
    name: str
    flag_bits: int
    method: int
    crc: int
    compressed_size: int
    size: int
    offset: int
    """Of its local header in the object (the archive's shift included)."""
    name_valid: bool = True
    """False when the name's bytes are not the UTF-8 its flag claims: `name` then holds them
    with U+FFFD for each bad sequence, and the member (not the archive) is refused."""
    raw_name: bytes = b""
    """The name's bytes as the directory stores them: the local header must hold the same."""

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")


def walk_directory(backend: Backend, key: str, limits: DirectoryLimits) -> Iterator[Entry]:
    """Every entry of the stored ZIP at `key`, in directory order (blocking ranged reads).

    Raises `DirectoryTooLarge` before reading the directory when the end records declare
    more than the limits allow, and during the walk as soon as it meets one entry more than
    `limits.max_entries`. Raises `NotAZipArchive` when the records are missing or damaged.
    """
    yield from walk_entries(backend, key, read_end_record(backend, key), limits)


def walk_entries(
    backend: Backend, key: str, end: EndRecord, limits: DirectoryLimits
) -> Iterator[Entry]:
    """`walk_directory` from end records already read (whose `directory_start` is where
    the last member's bytes must end)."""
    check_declared(end, limits)
    yield from _entries(_DirectoryReader(backend, key, end), end.shift, limits.max_entries)


def count_entries(backend: Backend, key: str, limits: DirectoryLimits) -> int:
    """Check a whole directory against the limits without keeping anything per entry."""
    return sum(1 for _ in walk_directory(backend, key, limits))


def check_declared(end: EndRecord, limits: DirectoryLimits) -> None:
    if end.entries > limits.max_entries:
        msg = (
            f"the archive declares {end.entries} members; the limit is {limits.max_entries}"
            " (PDFQUEUE_MAX_MEMBERS): split it into smaller ZIPs"
        )
        raise DirectoryTooLarge(msg)
    if end.directory_size > limits.max_directory_bytes:
        msg = (
            f"the archive's central directory is {end.directory_size} bytes;"
            f" the limit is {limits.max_directory_bytes} (PDFQUEUE_MAX_DIRECTORY_BYTES):"
            " split it into smaller ZIPs"
        )
        raise DirectoryTooLarge(msg)


def read_end_record(backend: Backend, key: str) -> EndRecord:
    """The end records, found with one ranged read of the object's last 64 KiB at most."""
    size = backend.size(key)
    tail_start = max(0, size - _TAIL_BYTES)
    tail = backend.read_range(key, tail_start, size - tail_start)
    at = _find_end(tail)
    if at < 0:
        raise NotAZipArchive("File is not a zip file (no end of central directory record)")
    _, _, _, _, entries, dir_size, dir_offset, _ = _END.unpack_from(tail, at)
    end_of_directory = tail_start + at
    zip64 = _read_zip64(tail, at)
    if zip64 is not None:
        entries, dir_size, dir_offset = zip64
        end_of_directory -= _LOCATOR.size + _END64.size
    directory_start = end_of_directory - dir_size
    shift = directory_start - dir_offset
    if directory_start < 0 or shift < 0:
        msg = "the end record places the central directory outside the archive"
        raise NotAZipArchive(msg)
    return EndRecord(entries, dir_size, directory_start, shift)


def _find_end(tail: bytes) -> int:
    """Where the end record starts in `tail`, or -1: at the very end when the archive has no
    comment (the usual case), else the last signature whose record fits, as `zipfile` does."""
    at = len(tail) - _END.size
    if at >= 0 and tail.startswith(_END_SIG, at) and tail.endswith(b"\0\0"):
        return at
    return tail.rfind(_END_SIG, 0, max(at + 4, 0))


def _read_zip64(tail: bytes, end_at: int) -> tuple[int, int, int] | None:
    """(entries, directory size, directory offset) from the ZIP64 records just before the
    end record, or None without them (where `zipfile` looks, no extensible data sector)."""
    at = end_at - _LOCATOR.size
    if at < 0 or not tail.startswith(_LOCATOR_SIG, at):
        return None
    _, disk, _, disks = _LOCATOR.unpack_from(tail, at)
    if disk != 0 or disks > 1:
        raise NotAZipArchive("zipfiles that span multiple disks are not supported")
    at -= _END64.size
    if at < 0 or not tail.startswith(_END64_SIG, at):
        raise NotAZipArchive("the ZIP64 end record is missing or damaged")
    fields = _END64.unpack_from(tail, at)
    return fields[7], fields[8], fields[9]


class _DirectoryReader:
    """The declared directory in ranged reads of READ_CHUNK_BYTES, consumed front to back."""

    def __init__(self, backend: Backend, key: str, end: EndRecord) -> None:
        self.backend = backend
        self.key = key
        self.next = end.directory_start
        self.stop = end.directory_start + end.directory_size
        self.buffer = b""
        self.at = 0

    @property
    def exhausted(self) -> bool:
        return self.at >= len(self.buffer) and self.next >= self.stop

    def take(self, length: int) -> bytes:
        if len(self.buffer) - self.at < length:
            self._refill(length)
        out = self.buffer[self.at : self.at + length]
        self.at += length
        return out

    def _refill(self, length: int) -> None:
        rest, self.buffer, self.at = self.buffer[self.at :], b"", 0  # one chunk held, not two
        want = min(max(length - len(rest), READ_CHUNK_BYTES), self.stop - self.next)
        more = self.backend.read_range(self.key, self.next, want) if want > 0 else b""
        self.next = self.next + len(more) if len(more) == want else self.stop
        self.buffer = rest + more if rest else more
        if len(self.buffer) < length:
            raise NotAZipArchive("Truncated central directory")


def _entries(reader: _DirectoryReader, shift: int, max_entries: int) -> Iterator[Entry]:
    index = 0
    while not reader.exhausted:
        fields = _ENTRY.unpack(reader.take(_ENTRY.size))
        if fields[0] != _ENTRY_SIG:
            raise NotAZipArchive("Bad magic number for central directory")
        if index == max_entries:  # whatever the end record said: it may lie
            msg = (
                f"the archive holds more than {max_entries} members; that is the limit"
                " (PDFQUEUE_MAX_MEMBERS): split it into smaller ZIPs"
            )
            raise DirectoryTooLarge(msg)
        name_length, extra_length, comment_length = fields[12:15]
        rest = reader.take(name_length + extra_length + comment_length)
        yield _entry(index, fields, rest[:name_length], rest[name_length:][:extra_length], shift)
        index += 1


def _entry(index: int, fields: tuple[int, ...], name: bytes, extra: bytes, shift: int) -> Entry:
    flags, method, crc, compressed, size, offset = (*fields[5:7], *fields[9:12], fields[18])
    size, compressed, offset = apply_zip64(extra, size, compressed, offset)
    decoded, valid = _decode_name(name, flags)
    return Entry(index, decoded, flags, method, crc, compressed, size, offset + shift, valid, name)


def _decode_name(raw: bytes, flags: int) -> tuple[str, bool]:
    """As `zipfile` does: UTF-8 when flagged, else cp437; cut at the first NUL. A name that
    is not the UTF-8 it claims is one member's fault, not the archive's: (its bytes with
    U+FFFD for each bad sequence, False)."""
    raw = raw.partition(b"\0")[0]
    if not flags & _UTF8_NAME:
        return raw.decode("cp437"), True
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), False
