"""Instrumentation hooks for workers: one decorator per job and one block per stage.

Each puts a span, a metric and the log context in place together, so task code reads as
`@observed_job("process", link=True)` and `with stage("extract"): ...`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from arq import Retry
from opentelemetry.trace import Span

from pdfqueue.domain.errors import transient_reason
from pdfqueue.observability import metrics, tracing
from pdfqueue.observability.logging import log_context

Task = Callable[..., Coroutine[Any, Any, Any]]


def observed_job(function: str, *, link: bool) -> Callable[[Task], Task]:
    """Wrap an arq task: CONSUMER span, log context, in-progress gauge and duration by result.

    The job's `trace` kwarg (made by `pdfqueue.stores.redis.queue.enqueue`) is taken off before the
    task runs; jobs queued before tracing existed simply have none. `link=True` starts a new
    trace linked to the producer instead of joining its trace (see
    `pdfqueue.observability.tracing`).
    """

    def decorate(task: Task) -> Task:
        @wraps(task)
        async def wrapper(ctx: dict[str, Any], **kwargs: Any) -> Any:
            carrier = kwargs.pop("trace", None)
            batch_id = kwargs.get("batch_id")
            members = kwargs.get("members")
            attributes: dict[str, Any] = {"pdfqueue.job_try": ctx.get("job_try", 1)}
            if batch_id:
                attributes[tracing.BATCH_ID] = batch_id
            if isinstance(members, list) and members:
                attributes[tracing.MEMBER_INDEX] = members[0]["index"]
                attributes[tracing.FILES] = len(members)
            started = time.perf_counter()
            result = "error"
            with (
                tracing.consumer_span(
                    function, ctx["job_id"], carrier, link=link, attributes=attributes
                ) as span,
                log_context(batch_id=batch_id, job_id=ctx["job_id"]),
                metrics.JOBS_IN_PROGRESS.labels(function).track_inprogress(),
            ):
                try:
                    value = await task(ctx, **kwargs)
                    result = "success"
                    return value
                except Retry as exc:
                    result = "retry"
                    cause = exc.__cause__ or exc
                    metrics.RETRIES.labels(function, transient_reason(cause)).inc()
                    tracing.record_error(span, cause)
                    raise
                except asyncio.CancelledError:
                    result = "cancelled"
                    raise
                except BaseException as exc:
                    tracing.record_error(span, exc)
                    raise
                finally:
                    span.set_attribute("pdfqueue.job_result", result)
                    metrics.JOB_DURATION.labels(function, result).observe(
                        time.perf_counter() - started
                    )

        return wrapper

    return decorate


@contextmanager
def stage(name: str) -> Iterator[Span]:
    """One step of a process job, for all of its PDFs at once (read, extract, match,
    record) or a wave of its linked ones (store, claim): a child span and a
    `pdfqueue_stage_duration_seconds` observation, also when the step fails."""
    started = time.perf_counter()
    try:
        with tracing.span(name) as current:
            yield current
    finally:
        metrics.STAGE_DURATION.labels(name).observe(time.perf_counter() - started)
