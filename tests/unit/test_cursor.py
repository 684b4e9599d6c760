"""A listing cursor is checked by range and form before any field of it reaches a query."""

from __future__ import annotations

import base64
import json

import pytest

from pdfqueue.domain.errors import InvalidCursor
from pdfqueue_api.service import decode_cursor


def _cursor(*fields: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(fields)).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor("0001-01-01T00:00:00+14:00", "0" * 32),
        _cursor("9999-12-31T23:59:59.999999-00:01", "0" * 32),
        _cursor("2026-01-01T00:00:00+00:00", "0" * 31),
        _cursor("2026-01-01T00:00:00+00:00", "G" * 32),
        _cursor("2026-01-01T00:00:00+00:00", "\x00" * 32),
    ],
)
def test_a_cursor_is_checked_by_range_and_form(cursor: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_cursor(cursor)


@pytest.mark.parametrize(
    "cursor",
    [
        _cursor("2026-01-01T00:00:00", "0" * 32),  # no timezone
        _cursor("2026-01-01T00:00:00+00:00", 12345),
        _cursor("2026-01-01T00:00:00+00:00", "0" * 32, "extra"),
        _cursor(20260101, "0" * 32),
        base64.urlsafe_b64encode(b'"ab"').decode().rstrip("="),  # two characters unpack too
        base64.urlsafe_b64encode(b"[" * 10_000).decode()[:250],
        "A" * 300,
    ],
)
def test_cursors_refused_by_form_stay_refused(cursor: str) -> None:
    """Refused before the range checks too: guards that the new checks keep them out."""
    with pytest.raises(InvalidCursor):
        decode_cursor(cursor)


def test_a_cursor_within_range_decodes_to_utc() -> None:
    when, batch_id = decode_cursor(_cursor("2026-01-01T10:00:00+02:00", "0" * 32))
    assert (when.isoformat(), batch_id) == ("2026-01-01T08:00:00+00:00", "0" * 32)
