"""Hostile ZIPs built byte by byte: a central directory and local headers that disagree."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

LOCAL = struct.Struct("<4s5H3L2H")
CENTRAL = struct.Struct("<4s4B4HL2L5H2L")
END = struct.Struct("<4s4H2LH")


@dataclass
class Part:
    """One stored member: `local` overrides what its local header says (name, method,
    flags, crc, compressed, size, extra); `gap` is written after its data."""

    name: bytes
    data: bytes
    local: dict[str, object] = field(default_factory=dict)
    gap: bytes = b""


def local_header(part: Part) -> bytes:
    say = {
        "name": part.name,
        "method": 0,
        "flags": 0,
        "crc": zlib.crc32(part.data),
        "compressed": len(part.data),
        "size": len(part.data),
        "extra": b"",
        "extra_length": None,
    } | part.local
    name, extra = say["name"], say["extra"]
    assert isinstance(name, bytes)
    assert isinstance(extra, bytes)
    extra_length = len(extra) if say["extra_length"] is None else say["extra_length"]
    fields = (say["flags"], say["method"], 0, 0, say["crc"], say["compressed"], say["size"])
    return LOCAL.pack(b"PK\x03\x04", 20, *fields, len(name), extra_length) + name + extra


def build(parts: list[Part], central: dict[int, dict[str, int]] | None = None) -> bytes:
    """The archive: each part's local header, data and gap, then a central directory that
    describes each part truthfully, except where `central[index]` says otherwise (keys:
    offset, crc, size, flags)."""
    body, entries = b"", b""
    for index, part in enumerate(parts):
        says = {"offset": len(body), "crc": zlib.crc32(part.data), "size": len(part.data)}
        says["flags"] = 0
        says |= (central or {}).get(index, {})
        body += local_header(part) + part.data + part.gap
        entries += CENTRAL.pack(
            b"PK\x01\x02", 20, 3, 20, 0, says["flags"], 0, 0, 0, says["crc"], says["size"], says["size"],
            len(part.name), 0, 0, 0, 0, 0, says["offset"],
        ) + part.name  # fmt: skip
    end = END.pack(b"PK\x05\x06", 0, 0, len(parts), len(parts), len(entries), len(body), 0)
    return body + entries + end
