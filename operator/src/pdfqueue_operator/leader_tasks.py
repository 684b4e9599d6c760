"""Leader-only background tasks: started when this process leads, cancelled when it stops.

Register them at import time on the default registry, from a module the operator imports
(`pdfqueue_operator/__init__.py` imports `handlers`; add yours beside it). A periodic step:

    from pdfqueue_operator.leader_tasks import LEADER_TASKS, LeaderContext

    async def rebuild(ctx: LeaderContext) -> None:
        await rebuild_lost_batches(ctx.settings, ctx.stores)   # one pass

    LEADER_TASKS.every("redis-rebuild", lambda s: s.rebuild_interval_s, rebuild)

or a coroutine that runs until it is cancelled: `LEADER_TASKS.add("name", run)`.

They run in the leader only (the one process holding the operator's Lease), from its
operator's startup (stores open, `ctx` ready) to the end of its term: a graceful stop, or a
Lease it could not renew, on which they are cancelled at once, before anything else stops,
since a standby may take over a moment later. Write them so that being cancelled at any
await is safe, and so that a new leader doing the same pass again is harmless (idempotent).
A periodic step that raises is logged once per run of failures and tried again next interval;
one that stops completing for STALE_TICKS intervals, or a long-running task that ends at all,
fails the operator's liveness probe and the pod is restarted. The autoscaler and the status
loop run here too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from pdfqueue.domain.errors import PdfQueueError
from pdfqueue.domain.settings import Settings
from pdfqueue.observability.periodic import Periodic, cancel_and_wait
from pdfqueue.runtime.connections import Stores
from pdfqueue_operator.kube import Kube

log = logging.getLogger(__name__)
STALE_TICKS = 20
"""A loop this many intervals behind fails the liveness probe (and the pod is restarted)."""


class TaskStalled(PdfQueueError):
    """A leader task stopped: the liveness probe fails with this."""


@dataclass(frozen=True)
class LeaderContext:
    """What a leader task gets: the operator's settings, open stores and Kubernetes client."""

    settings: Settings
    stores: Stores
    kube: Kube


Step = Callable[[LeaderContext], Awaitable[object]]
Run = Callable[[LeaderContext], Coroutine[Any, Any, None]]


def operator_loop(name: str, interval_s: float, step: Callable[[], Awaitable[object]]) -> Periodic:
    """One of the leader's loops; a step that hangs is cut off and tried again."""
    return Periodic(name, interval_s, step, timeout_s=max(30.0, 10 * interval_s))


def check(loop: Periodic) -> float:
    """Seconds since the loop's last good step; raises (failing the probe) when far too long."""
    age = loop.age_s()
    if age > STALE_TICKS * loop.interval_s + 30:
        raise TaskStalled(f"the {loop.name} loop has not completed for {age:.0f}s")
    return round(age, 1)


@dataclass(frozen=True)
class _Every:
    interval_s: float | Callable[[Settings], float]
    step: Step


@dataclass
class LeaderTasks:
    """The registry: what to start in each term (kopf's registry is the model)."""

    _specs: dict[str, _Every | Run] = field(default_factory=dict)

    def add(self, name: str, run: Run) -> None:
        """`run(ctx)` is started in each term and cancelled at its end; it should not return."""
        self._put(name, run)

    def every(self, name: str, interval_s: float | Callable[[Settings], float], step: Step) -> None:
        """`step(ctx)` every `interval_s` seconds (or a function of the settings) in each term."""
        self._put(name, _Every(interval_s, step))

    def _put(self, name: str, spec: _Every | Run) -> None:
        if name in self._specs:
            raise ValueError(f"leader task {name!r} is registered twice")
        self._specs[name] = spec

    def start(self, ctx: LeaderContext, loops: Iterable[Periodic] = ()) -> Running:
        """Start this term's tasks: the registered ones and the operator's own `loops`."""
        periodic = list(loops)
        forever: dict[str, Run] = {}
        for name, spec in self._specs.items():
            if isinstance(spec, _Every):
                every = spec.interval_s
                interval = every(ctx.settings) if callable(every) else every
                periodic.append(operator_loop(name, interval, _bound(spec.step, ctx)))
            else:
                forever[name] = spec
        running = Running(periodic)
        for loop in periodic:
            running.tasks[loop.name] = asyncio.create_task(loop.run(), name=f"leader-{loop.name}")
        for name, run in forever.items():
            running.tasks[name] = asyncio.create_task(run(ctx), name=f"leader-{name}")
        log.info("leader tasks started: %s", ", ".join(running.tasks))
        return running


def _bound(step: Step, ctx: LeaderContext) -> Callable[[], Awaitable[object]]:
    async def run() -> object:
        return await step(ctx)

    return run


@dataclass
class Running:
    """One term's tasks."""

    periodic: list[Periodic]
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def halt(self) -> None:
        """Cancel every task now, without waiting: the term is over (see `stop`)."""
        for task in self.tasks.values():
            task.cancel()

    async def stop(self) -> None:
        """Cancel every task and wait until each has really ended."""
        self.halt()
        for task in self.tasks.values():
            await cancel_and_wait(task)

    def health(self) -> dict[str, float]:
        """Each loop's seconds since its last good step; raises TaskStalled if one is stuck."""
        ages = {f"{loop.name}_age_s": check(loop) for loop in self.periodic}
        for name, task in self.tasks.items():
            if task.done():
                raise TaskStalled(f"the leader task {name} has ended")
        return ages


LEADER_TASKS = LeaderTasks()
"""The default registry, started by the operator's runtime in each term."""
