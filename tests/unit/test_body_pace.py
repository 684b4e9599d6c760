"""pdfqueue_api.upload.paced: only the waits for the client count against the body's pace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pdfqueue.domain.errors import BodyTooSlow
from pdfqueue_api.upload import BodyPace, paced


async def arriving(chunks: list[bytes], gap_s: float) -> AsyncIterator[bytes]:
    """A client sending `chunks`, one every `gap_s` seconds."""
    for chunk in chunks:
        await asyncio.sleep(gap_s)
        yield chunk


async def test_time_spent_storing_does_not_count_against_the_client() -> None:
    """The consumer takes longer than the window per chunk (a slow storage write); the
    client's bytes are always there when asked for, so nothing is too slow."""
    received = []
    async for chunk in paced(arriving([b"a" * 10] * 3, 0), BodyPace(0.2, 10)):
        await asyncio.sleep(0.3)
        received.append(chunk)
    assert len(received) == 3


async def test_bytes_below_the_rate_over_a_window_of_waiting_are_too_slow() -> None:
    with pytest.raises(BodyTooSlow, match=r": \d bytes in 0.3 s, under 100 bytes per second"):
        async for _ in paced(arriving([b"x"] * 100, 0.1), BodyPace(0.3, 100)):
            pass


async def test_a_window_that_brought_its_bytes_starts_the_next() -> None:
    """60 bytes every 0.1 s against a minimum of 100 per second of waiting: each window is
    done after two chunks, and the body lasts twice the window."""
    chunks = [b"y" * 60] * 20
    received = [c async for c in paced(arriving(chunks, 0.1), BodyPace(1.0, 100))]
    assert received == chunks


def test_a_pause_of_a_whole_window_always_ends_the_body() -> None:
    assert BodyPace(30, 0).window_bytes == 1  # no minimum rate: only the pause limit
    assert "no byte of the request body arrived for 30 s" in str(BodyPace(30, 0).too_slow(0))
