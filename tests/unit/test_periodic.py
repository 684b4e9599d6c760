"""The one periodic-task helper every background loop uses (no services needed)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pdfqueue.observability.periodic import Periodic


async def test_a_failing_step_is_logged_once_per_outage_and_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    results = iter([ValueError("down"), ValueError("still down"), None, ValueError("again")])
    seen: list[str] = []

    async def step() -> None:
        result = next(results)
        if result is not None:
            raise result

    loop = Periodic(
        "test",
        0,
        step,
        on_error=lambda exc: seen.append(f"error {exc}"),
        on_ok=lambda: seen.append("ok"),
    )
    with caplog.at_level(logging.WARNING, logger="pdfqueue.observability.periodic"):
        for _ in range(4):
            await loop.tick()
    assert seen == ["error down", "error still down", "ok", "error again"]
    assert [r.getMessage() for r in caplog.records] == [
        "test: step failed: ValueError('down')",
        "test: step failed: ValueError('again')",
    ]


async def test_a_hanging_step_is_cut_off_and_age_tells_since_the_last_good_one() -> None:
    hang = asyncio.Event()

    async def step() -> None:
        await hang.wait()

    loop = Periodic("hang", 0, step, timeout_s=0.01)
    before = loop.last_ok
    await loop.tick()
    assert loop.last_ok == before  # no success recorded
    assert loop.age_s() >= 0


async def test_start_and_stop_run_and_end_the_task() -> None:
    ticks = 0
    ticked = asyncio.Event()

    async def step() -> None:
        nonlocal ticks
        ticks += 1
        ticked.set()

    loop = Periodic("count", 0.01, step)
    loop.start()
    await ticked.wait()
    await loop.stop()
    after = ticks
    await asyncio.sleep(0.05)
    assert ticks == after >= 1
