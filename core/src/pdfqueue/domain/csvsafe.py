"""CSV cells a spreadsheet will not run: formula triggers are defused (OWASP CSV injection)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

FORMULA_TRIGGERS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
"""First characters that make Excel, LibreOffice or Google Sheets read a cell as a formula:
`= + - @`, tab and carriage return, and their full-width forms (U+FF1D, U+FF0B, U+FF0D,
U+FF20), which some of them fold to ASCII."""


def defuse(value: object) -> object:
    """A text cell starting with a formula trigger gets a leading `'`; other values pass as is.

    Numbers are written by pdfqueue itself and stay numbers; every string (a ZIP member's name
    above all) is the uploader's and may start with anything.
    """
    if isinstance(value, str) and value[:1] in FORMULA_TRIGGERS:
        return "'" + value
    return value


def csv_line(values: Iterable[object]) -> bytes:
    """One CSV record (RFC 4180 quoting of commas, quotes and newlines), every cell defused."""
    buf = io.StringIO()
    csv.writer(buf).writerow([defuse(v) for v in values])
    return buf.getvalue().encode()
