"""CSV cells a spreadsheet will not run or show as another text: formula triggers are
defused (OWASP CSV injection) and hidden characters written out (`names.visible`)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from pdfqueue.domain.names import visible

FORMULA_TRIGGERS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
"""First characters that make Excel, LibreOffice or Google Sheets read a cell as a formula:
`= + - @`, tab and carriage return, and their full-width forms (U+FF1D, U+FF0B, U+FF0D,
U+FF20), which some of them fold to ASCII."""


def defuse(value: object) -> object:
    """A text cell with its hidden characters written out (a bidi override in a name would
    show it as another), then a leading `'` if it starts with a formula trigger; other values
    pass as is.

    Numbers are written by pdfqueue itself and stay numbers; every string (a ZIP member's name
    above all) is the uploader's and may start with anything.
    """
    if not isinstance(value, str):
        return value
    shown = visible(value)
    return "'" + shown if shown[:1] in FORMULA_TRIGGERS else shown


def csv_line(values: Iterable[object]) -> bytes:
    """One CSV record (RFC 4180 quoting of commas, quotes and newlines), every cell defused."""
    buf = io.StringIO()
    csv.writer(buf).writerow([defuse(v) for v in values])
    return buf.getvalue().encode()
