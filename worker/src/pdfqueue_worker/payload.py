"""A member's compressed bytes, cut from a job's ranged read, and their inflation anywhere."""

from __future__ import annotations

import struct
import zipfile

from pdfqueue_worker.archive import Member, MemberRejected, decode_members

_HEADER = struct.Struct(zipfile.structFileHeader)


class _Unfetchable:
    """A backend for `decode_members` when the bytes at hand are all there is."""

    def read_range(self, key: str, start: int, length: int) -> bytes:
        raise MemberRejected("corrupt_member", "the member runs past the bytes that were read")


def cut(data: bytes, start: int, member: Member) -> tuple[bytes, int]:
    """The member's local header and compressed data out of `data` (read from `start`),
    and how many more bytes it needs past what `data` holds (a local header may be long)."""
    lo = member.offset - start
    raw = data[lo : lo + member.end - member.offset]
    if len(raw) < _HEADER.size or raw[:4] != zipfile.stringFileHeader:
        return raw, 0  # inflating it will say what is wrong
    fields = _HEADER.unpack(raw[: _HEADER.size])
    need = (
        _HEADER.size
        + fields[zipfile._FH_FILENAME_LENGTH]
        + fields[zipfile._FH_EXTRA_FIELD_LENGTH]
        + member.compressed_size
    )
    return raw, max(need - len(raw), 0)


def inflate(raw: bytes, member: Member) -> bytes:
    """The member's bytes, checked against its size and CRC; never more than its declared
    size (at most PDFQUEUE_MAX_PDF_BYTES), and `too_large` when memory runs out first."""
    result = decode_members(_Unfetchable(), "", [member], raw)[0]  # type: ignore[arg-type]
    if isinstance(result, MemberRejected):
        if isinstance(result.__cause__, MemoryError):
            raise MemberRejected("too_large", f"{member.name!r} does not fit in memory")
        raise result
    return result
