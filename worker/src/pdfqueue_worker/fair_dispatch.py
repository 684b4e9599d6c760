"""Fair dispatch from the worker's side: register at ingest, refill as process jobs finish."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterable
from functools import wraps
from typing import Any

from pdfqueue.stores.redis.fair_dispatch import Dispatcher
from pdfqueue.stores.redis.queue import Job, enqueue_chunked
from pdfqueue_worker.deps import Deps

log = logging.getLogger(__name__)
Task = Callable[..., Coroutine[Any, Any, Any]]


async def submit(deps: Deps, batch_id: str, jobs: Iterable[Job], first: int = 0) -> int:
    """Hand the batch's process jobs over: as pending work (fair dispatch), or straight into
    the queue when fair dispatch is off. Returns how many were new. `first` numbers the
    first chunk (see Dispatcher.register)."""
    settings = deps.settings
    if not settings.dispatch_fair:
        return await enqueue_chunked(deps.redis, settings.queue_name, jobs, settings.enqueue_chunk)
    found = await deps.lifecycle.reads.read(batch_id)
    tenant = found.tenant if found is not None else ""
    dispatcher = Dispatcher.from_settings(deps.redis, settings)
    added = await dispatcher.register(batch_id, tenant, jobs, settings.enqueue_chunk, first)
    await dispatcher.dispatch()
    return added


def refills(task: Task) -> Task:
    """After the job ends (not when it is retried), release work into the slot it frees.

    A refill that fails costs nothing but latency: the worker's tick dispatches anyway.
    """

    @wraps(task)
    async def wrapper(ctx: dict[str, Any], **kwargs: Any) -> Any:
        result = await task(ctx, **kwargs)
        deps: Deps = ctx["deps"]
        if deps.settings.dispatch_fair:
            try:
                await Dispatcher.from_settings(deps.redis, deps.settings).dispatch(ctx["job_id"])
            except Exception as exc:
                log.warning("refill failed: %r", exc, extra={"job_id": ctx["job_id"]})
        return result

    return wrapper
