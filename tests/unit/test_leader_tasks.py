"""The registry of leader-only tasks (pdfqueue_operator.leader_tasks): started per term, and
cancelled at once when the term ends."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_operator.leader_tasks import LeaderContext, LeaderTasks, TaskStalled


def context() -> LeaderContext:
    # The tasks here use only the settings: stores and client stand in as placeholders.
    return LeaderContext(Settings(), cast(Any, None), cast(Any, None))


async def test_tasks_start_with_a_term_and_are_cancelled_the_moment_it_ends() -> None:
    registry = LeaderTasks()
    steps: list[float] = []
    cancelled = asyncio.Event()

    async def step(ctx: LeaderContext) -> None:
        steps.append(ctx.settings.operator_lease_retry_period_s)

    async def forever(_: LeaderContext) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    registry.every("rebuild", lambda s: s.operator_scale_interval_s / 100, step)
    registry.add("follow", forever)
    assert not steps  # registering starts nothing: only a term does
    running = registry.start(context())
    await asyncio.sleep(0.1)
    assert len(steps) >= 3
    assert set(running.health()) == {"rebuild_age_s"}
    running.halt()  # the term is over: no waiting, no further step
    seen = len(steps)
    await asyncio.sleep(0.05)
    assert len(steps) == seen
    assert cancelled.is_set()
    await running.stop()
    assert all(t.done() for t in running.tasks.values())


async def test_a_task_that_ends_fails_the_liveness_probe_and_names_are_unique() -> None:
    registry = LeaderTasks()

    async def quits(_: LeaderContext) -> None:
        return None

    registry.add("quits", quits)
    with pytest.raises(ValueError, match="registered twice"):
        registry.add("quits", quits)
    running = registry.start(context())
    await asyncio.sleep(0.01)
    with pytest.raises(TaskStalled, match="quits has ended"):
        running.health()
    await running.stop()
