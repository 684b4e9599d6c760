"""Waiting for a store at start: try again with a doubling delay, saying why, until a deadline."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
FIRST_DELAY_S = 0.5


async def until_ready(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    errors: tuple[type[Exception], ...],
    timeout_s: float | None,
    max_delay_s: float,
) -> T:
    """`attempt()`'s result once it stops raising one of `errors`; each failure is logged as
    "`what`: cause". Past `timeout_s` (None: never) the last error is raised: a delay that
    would end after the deadline is not slept."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = FIRST_DELAY_S
    while True:
        try:
            return await attempt()
        except errors as exc:
            if deadline is not None and time.monotonic() + delay > deadline:
                raise
            log.warning("%s: %s", what, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_delay_s)
