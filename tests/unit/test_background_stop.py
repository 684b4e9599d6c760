"""Background loops stop when asked, whenever the ask lands: even as a tick is finishing.

Python 3.11's `asyncio.wait_for` swallows a cancellation that arrives after the awaited call has
finished but before the caller resumed; a loop built on it then runs on, and the `stop()` that
cancelled it waits forever (an API's lifespan shutdown hung that way in the suite). Each test
lets one tick finish, then cancels 0, 1, 2, ... loop iterations later, so every interleaving is
tried, that one included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from pdfqueue.observability.periodic import Periodic, cancel_and_wait

DELAYS = range(12)  # loop iterations between the end of a tick and the cancel


class Gate:
    """A tick the test finishes when it chooses (it never touches a service)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def tick(self) -> None:
        self.entered.set()
        await self.release.wait()


async def stops_promptly(
    start: Callable[[], None], stop: Callable[[], Awaitable[None]], gate: Gate, delay: int
) -> bool:
    start()
    await asyncio.wait_for(gate.entered.wait(), 5)
    gate.release.set()
    for _ in range(delay):
        await asyncio.sleep(0)
    stopping = asyncio.ensure_future(stop())
    done, _ = await asyncio.wait({stopping}, timeout=2)  # a bound for the failure only
    if not done:
        stopping.cancel()
    return bool(done)


@pytest.mark.parametrize("delay", DELAYS)
async def test_periodic_loops_stop_even_as_a_step_ends(delay: int) -> None:
    """Every background loop (dispatch tick, gauges, heartbeat, event feed, operator loops) is a
    Periodic: stopping one ends it whenever the stop lands."""
    gate = Gate()
    loop = Periodic("unit", interval_s=60, step=gate.tick)
    stopped = await stops_promptly(loop.start, loop.stop, gate, delay)
    if not stopped and loop._task is not None:
        loop._task.cancel()  # the swallowed cancel, again, so nothing outlives the test
    assert stopped
    assert loop._task is None


async def test_a_loop_that_loses_a_cancel_is_cancelled_again() -> None:
    """Whatever drops a cancel below a loop (a library's cleanup, say), stopping still ends it."""
    ticks = 0

    async def loop() -> None:
        nonlocal ticks
        lost = False
        while True:
            ticks += 1
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                if lost:
                    raise
                lost = True  # the first cancel is swallowed, as a library might

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(cancel_and_wait(task))
    done, _ = await asyncio.wait({stopping}, timeout=10)  # a bound for the failure only
    if not done:
        task.cancel()
        task.cancel()
    assert done
    assert task.cancelled()
    assert ticks == 2  # it went round once more after the lost cancel, then ended


async def test_a_loop_that_fails_as_it_stops_raises_its_error() -> None:
    async def loop() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)
    await cancel_and_wait(None)  # nothing started: nothing to do
