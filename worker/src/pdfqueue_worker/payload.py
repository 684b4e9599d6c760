"""One ZIP member: where its bytes are, cut from a job's ranged read, and their inflation.

Parsing processes import this (the forkserver preloads it): it must stay light, so it uses
the standard library and `pdfqueue.domain` (no driver) only, and never imports `archive`
(the listing, which pulls in the S3 client); `archive` imports it.

The central directory and the local header are two descriptions of one member: every field
both hold must agree (name bytes, method, the flags that change how the bytes are read, CRC
and sizes unless a data descriptor defers them), and the data the local header places must
lie inside the member's room, before the next member's header. Any disagreement fails the
member as `corrupt_member`: tools that read the local header would see another file.
"""

from __future__ import annotations

import hashlib
import struct
import zipfile
import zlib
from dataclasses import asdict, dataclass
from typing import Any

from pdfqueue.domain.errors import FileRejected, NotAZipArchive
from pdfqueue.domain.names import safe_name
from pdfqueue.domain.zip64 import apply_zip64

# A ZIP local file header (APPNOTE 4.3.7), as zipfile reads it but does not export:
# signature, versions, flags, method, time, date, CRC, sizes, name and extra field lengths.
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
LOCAL_SIGNATURE = b"PK\x03\x04"
_FLAGS, _METHOD, _CRC, _COMPRESSED, _SIZE, _NAME_LENGTH, _EXTRA_LENGTH = 3, 4, 7, 8, 9, 10, 11
_DESCRIPTOR = 0x08  # CRC and sizes follow the data (general purpose flag bit 3)
_READ_FLAGS = 0x2869
"""Flag bits that change how a member's bytes are read: encrypted (0), data descriptor (3),
patched data (5), strong encryption (6), UTF-8 name (11), masked header values (13)."""
_U32_MAX = 0xFFFF_FFFF
_NAME_MARGIN = 1024  # local header name + extra field; read again if it is larger


@dataclass(frozen=True, slots=True)
class Member:
    """Where one member's bytes are inside the archive: enough to read it with one ranged GET."""

    index: int
    name: str
    offset: int
    compressed_size: int
    size: int
    method: int
    crc: int
    flag_bits: int | None = None
    name_digest: str | None = None
    """Of the name's bytes in the directory: its local header must hold the same."""
    limit: int | None = None
    """Where the next member's local header (or the directory) starts: this one's data ends
    before it. The three are None in a job listed before they were checked."""

    @property
    def end(self) -> int:
        """Where a read of this member may stop: its data plus room for the local header."""
        return self.offset + LOCAL_HEADER.size + _NAME_MARGIN + self.compressed_size

    def to_job(self) -> dict[str, Any]:
        return asdict(self)


class Uninflatable(FileRejected):
    """This member cannot be inflated."""


@dataclass(frozen=True)
class Packed:
    """What inflating one member needs, as the central directory declares it."""

    name: str
    size: int
    compressed_size: int
    method: int
    crc: int
    flag_bits: int | None = None
    name_digest: str | None = None
    room: int | None = None
    """Bytes from its local header to the next member's (or the directory): where its data
    must end. None (like the two above) for a job listed before these were checked."""

    @classmethod
    def of(cls, m: Member) -> Packed:
        room = None if m.limit is None else m.limit - m.offset
        return cls(
            m.name, m.size, m.compressed_size, m.method, m.crc, m.flag_bits, m.name_digest, room
        )


def name_digest(raw_name: bytes) -> str:
    """A short fingerprint of a member's name bytes, for a job to carry instead of them."""
    return hashlib.blake2b(raw_name, digest_size=16).hexdigest()


def cut(data: bytes, start: int, member: Member) -> tuple[bytes, int]:
    """The member's local header and compressed data out of `data` (read from `start`),
    and how many more bytes it needs past what `data` holds (a local header may be long)."""
    lo = member.offset - start
    raw = data[lo : lo + member.end - member.offset]
    return raw, max(wanted(raw, Packed.of(member)) - len(raw), 0)


def wanted(header: bytes, packed: Packed) -> int:
    """How many bytes from its local header on hold the member: its data's end, unless that
    lies outside its room or the header is not one (inflating then says what is wrong, and
    nothing past the room, or past the object's end, is read)."""
    if len(header) < LOCAL_HEADER.size or header[:4] != LOCAL_SIGNATURE:
        return len(header)
    end = data_start(header) + packed.compressed_size
    return len(header) if packed.room is not None and end > packed.room else end


def data_start(header: bytes) -> int:
    """Where a member's compressed data starts, counted from its local header's first byte."""
    fields: tuple[int, ...] = LOCAL_HEADER.unpack(header[: LOCAL_HEADER.size])
    return LOCAL_HEADER.size + fields[_NAME_LENGTH] + fields[_EXTRA_LENGTH]


def inflate(raw: bytes, packed: Packed) -> bytes:
    """The member's bytes, checked against its size and CRC, from its local header and
    compressed data: never more than its declared size (at most PDFQUEUE_MAX_PDF_BYTES),
    and `too_large` when memory runs out first.

    zlib directly, not `zipfile.ZipExtFile`: the archive takes only stored and deflated
    members (`archive`), and for a résumé of a few KiB the file object's set-up and chunked
    reads cost more than the inflating itself, twice per linked PDF (its parsing process
    and the worker's store step)."""
    if len(raw) < LOCAL_HEADER.size or raw[:4] != LOCAL_SIGNATURE:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: no local header at its offset")
    start = data_start(raw)
    if (why := disagreement(raw, packed)) is not None:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: {why}; create the ZIP again")
    body = raw[start : start + packed.compressed_size]
    if len(body) < packed.compressed_size:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: the archive ends inside it")
    try:
        data = _expanded(body, packed)
    except MemoryError as exc:
        raise Uninflatable("too_large", f"{packed.name!r} does not fit in memory") from exc
    except zlib.error as exc:  # a damaged deflate stream
        raise Uninflatable("corrupt_member", f"{packed.name!r}: {exc}") from exc
    if len(data) != packed.size:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: size differs from the directory")
    if zlib.crc32(data) != packed.crc:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: bad CRC-32")
    return data


def disagreement(raw: bytes, packed: Packed) -> str | None:
    """How the local header at the start of `raw` contradicts the central directory, or None.

    Stricter than `zipfile`, which compares only the name: every field both records hold.
    With a data descriptor, the local CRC and sizes may be zero; the inflated bytes are then
    checked against the directory's CRC and size (`inflate`)."""
    fields: tuple[int, ...] = LOCAL_HEADER.unpack(raw[: LOCAL_HEADER.size])
    start = data_start(raw)
    if packed.room is not None and start + packed.compressed_size > packed.room:
        return "its local header places its data past its room (into another member)"
    name = raw[LOCAL_HEADER.size : LOCAL_HEADER.size + fields[_NAME_LENGTH]]
    if packed.name_digest is not None and name_digest(name) != packed.name_digest:
        other = safe_name(name.decode("utf-8", "replace"), 120)
        return f"its local header names another file ({other!r})"
    if fields[_METHOD] != packed.method:
        return f"its local header says compression {fields[_METHOD]}"
    flags = fields[_FLAGS]
    if packed.flag_bits is not None and (flags ^ packed.flag_bits) & _READ_FLAGS:
        return f"its local header's flags {flags:#06x} differ from the directory's"
    return _sizes_disagree(raw, fields, packed)


def _sizes_disagree(raw: bytes, fields: tuple[int, ...], packed: Packed) -> str | None:
    """Whether the local CRC and sizes (ZIP64 ones included) contradict the directory's."""
    start = data_start(raw)
    try:
        size, compressed, _ = apply_zip64(
            raw[start - fields[_EXTRA_LENGTH] : start], fields[_SIZE], fields[_COMPRESSED], 0
        )
    except NotAZipArchive as exc:
        return f"its local header's extra field is damaged ({exc})"
    local = (fields[_CRC], compressed, size)
    declared = (packed.crc, packed.compressed_size, packed.size)
    deferred = fields[_FLAGS] & _DESCRIPTOR
    pairs = zip(local, declared, strict=True)
    if any(got != want and not (deferred and got == 0) for got, want in pairs):
        return "its local header's CRC or sizes differ from the directory's"
    return None


def _expanded(body: bytes, packed: Packed) -> bytes:
    """`body` decompressed, one byte past the declared size at most (so that a longer
    member shows as one)."""
    if packed.method == zipfile.ZIP_STORED:
        return body[: packed.size + 1]
    if packed.method != zipfile.ZIP_DEFLATED:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: compression {packed.method}")
    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, packed.size + 1)
