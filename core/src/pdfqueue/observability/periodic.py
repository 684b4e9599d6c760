"""Background steps a process runs every few seconds from start to shutdown, in one way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


RECANCEL_S = 1.0
"""How long a stopping task has to end before it is cancelled again."""


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    """Stop a background task and wait until it has really ended (None: nothing to do).

    A cancel can be lost below the task: Python 3.11's `wait_for` drops one that lands as its
    awaitable finishes, and a client library's cleanup may too. The task then runs on, so the
    cancel is sent again until the task has ended, instead of waiting for it forever.
    """
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass
class Periodic:
    """Run `step` every `interval_s` until stopped; a failing step is tried again next tick.

    A step that raises is logged once per run of failures (Redis down must not flood the
    log), and `on_error` / `on_ok` let the caller keep a gauge of it. `timeout_s` bounds a
    step that hangs. `age_s` says how long ago a step last succeeded (liveness probes).
    """

    name: str
    interval_s: float
    step: Callable[[], Awaitable[object]]
    timeout_s: float | None = None
    on_error: Callable[[Exception], None] | None = None
    on_ok: Callable[[], None] | None = None
    last_ok: float = field(default_factory=time.monotonic)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)
    _failing: bool = field(default=False, init=False, repr=False)
    _stopping: bool = field(default=False, init=False, repr=False)

    async def tick(self) -> None:
        """One step, its failure logged and reported, never raised."""
        try:
            # not wait_for: on 3.11 it can swallow a cancellation that arrives as the step
            # ends, and the loop would then outlive `stop`
            async with asyncio.timeout(self.timeout_s):
                await self.step()
        except Exception as exc:
            if not self._failing:
                log.warning("%s: step failed: %r", self.name, exc)
            self._failing = True
            if self.on_error is not None:
                self.on_error(exc)
        else:
            self._failing = False
            self.last_ok = time.monotonic()
            if self.on_ok is not None:
                self.on_ok()

    async def run(self) -> None:
        while not self._stopping:
            await self.tick()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"pdfqueue-{self.name}")

    async def stop(self) -> None:
        self._stopping = True  # ends the loop even if a cancellation got lost
        await cancel_and_wait(self._task)
        self._task = None

    def age_s(self) -> float:
        """Seconds since the last step that succeeded (or since this was built)."""
        return time.monotonic() - self.last_ok
