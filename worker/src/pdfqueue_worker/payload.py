"""A member's compressed bytes, cut from a job's ranged read, and their inflation anywhere.

Parsing processes import this (the forkserver preloads it): it must stay light, so it uses
the standard library and `pdfqueue.domain.errors` (no driver) only, and never imports `archive`
(which pulls in the S3 client).
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdfqueue.domain.errors import FileRejected

if TYPE_CHECKING:
    from pdfqueue_worker.archive import Member

# A ZIP local file header (APPNOTE 4.3.7), as zipfile reads it but does not export:
# signature, versions, flags, method, time, date, CRC, sizes, name and extra field lengths.
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
LOCAL_SIGNATURE = b"PK\x03\x04"
_NAME_LENGTH, _EXTRA_LENGTH = 10, 11  # their places among the unpacked fields


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

    @classmethod
    def of(cls, m: Member) -> Packed:
        return cls(m.name, m.size, m.compressed_size, m.method, m.crc)


def cut(data: bytes, start: int, member: Member) -> tuple[bytes, int]:
    """The member's local header and compressed data out of `data` (read from `start`),
    and how many more bytes it needs past what `data` holds (a local header may be long)."""
    lo = member.offset - start
    raw = data[lo : lo + member.end - member.offset]
    if len(raw) < LOCAL_HEADER.size or raw[:4] != LOCAL_SIGNATURE:
        return raw, 0  # inflating it will say what is wrong
    return raw, max(data_start(raw) + member.compressed_size - len(raw), 0)


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


def _expanded(body: bytes, packed: Packed) -> bytes:
    """`body` decompressed, one byte past the declared size at most (so that a longer
    member shows as one)."""
    if packed.method == zipfile.ZIP_STORED:
        return body[: packed.size + 1]
    if packed.method != zipfile.ZIP_DEFLATED:
        raise Uninflatable("corrupt_member", f"{packed.name!r}: compression {packed.method}")
    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, packed.size + 1)
