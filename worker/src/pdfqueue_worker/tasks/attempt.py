"""What every task does around its work: a try given back on shutdown, a failure remembered
for the last try and retried later, and its files' outcomes recorded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any

from arq import Retry
from arq.constants import retry_key_prefix

from pdfqueue.domain import keys
from pdfqueue.domain.errors import PdfQueueError, transient_reason
from pdfqueue.domain.models import Decision, FileRef, Outcome
from pdfqueue.observability.tracing import file_event
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.observe import stage

log = logging.getLogger(__name__)
Task = Callable[..., Coroutine[Any, Any, Any]]
ERASED = "erased"
"""What a job of a batch whose erasure is accepted returns, before doing anything: every
batch-work job (ingest, process, retry, recover) asks `Lifecycle.buried` first."""


def keeps_try_on_shutdown(task: Task) -> Task:
    """A job cancelled by a graceful shutdown runs again without spending one of its tries.

    arq counts a try when the job starts; on SIGTERM past `job_completion_wait` it cancels
    the job and leaves it queued. Giving the try back keeps deploys from failing PDFs.
    """

    @wraps(task)
    async def wrapper(ctx: dict[str, Any], **kwargs: Any) -> Any:
        try:
            return await task(ctx, **kwargs)
        except asyncio.CancelledError:
            await asyncio.shield(give_try_back(ctx))
            raise

    return wrapper


async def give_try_back(ctx: dict[str, Any]) -> None:
    """This try does not count against the job's tries (arq counted it when it started)."""
    deps: Deps = ctx["deps"]
    await deps.redis.decr(retry_key_prefix + ctx["job_id"])


LAST_ERROR_TTL_S = 7 * 24 * 3600


class ScansWaiting(PdfQueueError, TimeoutError):
    """A try that recorded nothing because its scans wait for the worker's OCR turns: it runs
    again once a turn may be free, not at once (each run reads the job's span again)."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.wait_s = wait_s


async def retry_later(deps: Deps, ctx: dict[str, Any], exc: Exception) -> Retry:
    """Remember why this try failed (the final reason if tries run out), then defer a retry."""
    reason = transient_reason(exc)
    log.warning(
        "try %d failed (%s): %r", ctx["job_try"], reason, exc, extra={"job_id": ctx["job_id"]}
    )
    with contextlib.suppress(Exception):  # Redis may be the thing that is down
        await deps.redis.set(keys.last_error(ctx["job_id"]), reason, ex=LAST_ERROR_TTL_S)
    defer = deps.backoff_s(ctx["job_try"])
    if isinstance(exc, ScansWaiting):
        defer = max(defer, exc.wait_s)
    return Retry(defer=defer)


async def last_try_error(deps: Deps, ctx: dict[str, Any]) -> str:
    raw = await deps.redis.get(keys.last_error(ctx["job_id"]))
    # No recorded error means every try died with its worker (OOM kill, node loss).
    return raw.decode() if isinstance(raw, bytes) else (raw or "worker_lost")


async def record_outcomes(
    deps: Deps, batch_id: str, decided: dict[FileRef, Decision]
) -> list[Outcome]:
    """Record the files' outcomes; each becomes an event of the job's span."""
    with stage("record"):
        final = await deps.lifecycle.record(batch_id, decided)
    for ref, d in zip(decided, final, strict=True):
        file_event(ref.index, d.outcome.value, d.reason)
    return [d.outcome for d in final]
