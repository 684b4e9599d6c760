"""ZIP64 extra fields, read the same way from a central directory entry and a local header."""

from __future__ import annotations

import struct

from pdfqueue.domain.errors import NotAZipArchive

_ZIP64_EXTRA = 0x0001
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF


def apply_zip64(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """Sizes and offset from the ZIP64 extra field where the 32-bit ones are maxed out,
    with the checks `zipfile.ZipInfo._decodeExtra` makes (a local header's extra field is
    read the same way, with no offset)."""
    while len(extra) >= 4:
        kind, length = struct.unpack_from("<HH", extra)
        if length + 4 > len(extra):
            raise NotAZipArchive(f"Corrupt extra field {kind:04x} (size={length})")
        if kind == _ZIP64_EXTRA:
            data = extra[4 : length + 4]
            try:
                if size in (_U64_MAX, _U32_MAX):
                    (size,), data = struct.unpack_from("<Q", data), data[8:]
                if compressed == _U32_MAX:
                    (compressed,), data = struct.unpack_from("<Q", data), data[8:]
                if offset == _U32_MAX:
                    (offset,) = struct.unpack_from("<Q", data)
            except struct.error as exc:
                raise NotAZipArchive("Corrupt zip64 extra field") from exc
        extra = extra[length + 4 :]
    return size, compressed, offset
