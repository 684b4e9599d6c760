"""Background asyncio tasks that a process starts at startup and stops at shutdown."""

from __future__ import annotations

import asyncio
import contextlib

RECANCEL_S = 1.0
"""How long a stopping loop has to end before it is cancelled again."""


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Stop a background loop and wait until it has really ended (None: nothing to do).

    A cancel can be lost below the loop: Python 3.11's `wait_for` drops one that lands as its
    awaitable finishes, and a client library's cleanup may too. The loop then runs on, so the
    cancel is sent again until the task has ended, instead of waiting for it forever.
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    with contextlib.suppress(asyncio.CancelledError):
        await task
