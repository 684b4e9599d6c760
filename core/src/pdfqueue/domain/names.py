"""ZIP member names as pdfqueue stores and reports them: bounded, and text any store takes."""

from __future__ import annotations

import re
import unicodedata

MAX_MEMBER_NAME_BYTES = 1024
"""Longest member name kept as it is, in bytes of UTF-8. A longer one fails its file with
`name_too_long` and is reported cut to this many bytes. Why 1024: four times a file system's
own limit on one path part (255 bytes), and far under what a btree index entry of PostgreSQL
may hold (about 2700 bytes, a third of a page), so every index over names holds whatever a
ZIP may name. Not a setting: raising it past that bound would strand batches again."""

REPLACEMENT = "\ufffd"
_ELLIPSIS = "\u2026"
_TAIL_BYTES = 64
"""Of a cut name, the end kept after the ellipsis (the extension stays visible)."""

# What no PostgreSQL text holds: NUL, and lone surrogates (no UTF-8 encodes them). Other
# controls and bidi marks are data, kept as the ZIP has them: the JSON report is data; the
# CSV export shows them as `visible` does and the page the same way (page.js `visible`).
_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def utf8_length(name: str) -> int:
    """Bytes of `name` in UTF-8, a lone surrogate counted as the three it would take."""
    return len(name.encode("utf-8", "surrogatepass"))


def too_long(name: str) -> bool:
    return utf8_length(name) > MAX_MEMBER_NAME_BYTES


def safe_name(name: str, max_bytes: int = MAX_MEMBER_NAME_BYTES) -> str:
    """`name` as stored and reported: each NUL or lone surrogate replaced by U+FFFD, and a
    name over `max_bytes` cut to its start, an ellipsis and its end, so the result is at
    most `max_bytes` of valid UTF-8 that any PostgreSQL text column takes."""
    clean = _UNSAFE.sub(REPLACEMENT, name)
    if len(clean.encode()) <= max_bytes:
        return clean
    tail = _cut(clean[::-1], min(_TAIL_BYTES, max_bytes // 4))[::-1]
    room = max_bytes - len(_ELLIPSIS.encode()) - len(tail.encode())
    return _cut(clean, room) + _ELLIPSIS + tail


def _cut(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` within `max_bytes` of UTF-8 (never half a character)."""
    return text.encode()[: max(max_bytes, 0)].decode("utf-8", "ignore")


HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})
"""Characters that show as nothing or move other text: format characters (bidi overrides
and isolates U+202A-202E and U+2066-2069, marks U+200E/F and U+061C, zero-width U+200B-200D,
U+2060, U+FEFF, ...), controls, and the line and paragraph separators."""
SHOWN_CONTROLS = frozenset("\t\n\r")
"""Controls left as they are: a CSV cell quotes them (and defuses a leading tab or CR)."""


def _hidden(c: str) -> bool:
    return unicodedata.category(c) in HIDDEN_CATEGORIES and c not in SHOWN_CONTROLS


def visible(name: str) -> str:
    """`name` as a person should see it: each hidden character written `⟨U+202E⟩`, so that
    `cv\u202excod.pdf` cannot show as `cvdocx.pdf` (the report's display form; JSON keeps
    the name exact). The page does the same (page.js `visible`)."""
    if not any(_hidden(c) for c in name):
        return name
    return "".join(f"\u27e8U+{ord(c):04X}\u27e9" if _hidden(c) else c for c in name)
