"""The `retry` task: fan a retry round's files out as `process` jobs of their own."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pdfqueue.domain import keys
from pdfqueue.domain.errors import PermanentError
from pdfqueue.domain.models import BatchStatus, FileRef, failed
from pdfqueue.stores.redis.fair_dispatch import chunks_before
from pdfqueue.stores.redis.queue import Job
from pdfqueue_worker.archive import Listing, list_members, plan_slices
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.fair_dispatch import submit
from pdfqueue_worker.observe import observed_job
from pdfqueue_worker.tasks.attempt import (
    ERASED,
    keeps_try_on_shutdown,
    last_try_error,
    record_outcomes,
    retry_later,
)

log = logging.getLogger(__name__)
UPLOAD_GONE = "upload_gone"
"""The reason of a retried file whose ZIP is no longer in storage (it expired)."""


@observed_job("retry", link=False)
@keeps_try_on_shutdown
async def retry(ctx: dict[str, Any], *, batch_id: str, source: str, retry_round: int) -> str:
    """Queue a `process` job per run of the round's files still undecided; idempotent.

    A file the ZIP no longer holds (the upload expired) or that the listing now rejects is
    recorded `failed` at once, so the round always completes.
    """
    deps: Deps = ctx["deps"]
    try:
        async with asyncio.timeout(deps.settings.job_timeout_s):
            if await deps.lifecycle.reads.buried(batch_id):  # its erasure is accepted
                return ERASED
            if ctx["job_try"] > deps.settings.max_tries:
                return await _give_up(deps, batch_id, await last_try_error(deps, ctx))
            return await _fan_out(deps, batch_id, source, retry_round)
    except Exception as exc:
        raise await retry_later(deps, ctx, exc) from exc


async def _fan_out(deps: Deps, batch_id: str, source: str, round_: int) -> str:
    if await deps.lifecycle.reads.status(batch_id) is BatchStatus.CANCELLED:
        await deps.lifecycle.settle(batch_id)
        return "cancelled"
    names = await deps.files.retrying(batch_id)
    todo = set(await deps.lifecycle.reads.unrecorded(batch_id, sorted(names)))
    if not todo:
        return "nothing to do"
    try:
        listing = await deps.storage.run(list_members, deps.storage.backend, source, deps.limits)
    except PermanentError as exc:
        log.warning("retry: archive unreadable: %s", exc, extra={"batch_id": batch_id})
        listing = Listing()
    members = [m for m in listing.pdfs if m.index in todo]
    gone = {FileRef(batch_id, i, names[i]): failed(UPLOAD_GONE) for i in todo}
    for m in members:
        gone.pop(FileRef(batch_id, m.index, names[m.index]), None)
    for index, _, why in listing.rejected:
        if index in todo:
            gone[FileRef(batch_id, index, names[index])] = failed(why.reason)
    if gone:
        await record_outcomes(deps, batch_id, gone)
    jobs = [
        Job(
            keys.retry_process_job(batch_id, round_, run[0].index),
            "process",
            {"batch_id": batch_id, "source": source, "members": [m.to_job() for m in run]},
            cost=len(run),
        )
        for run in plan_slices(members, deps.settings.pdfs_per_job, deps.settings.job_max_bytes)
    ]
    first = await _first_chunk(deps, batch_id, round_)
    added = await submit(deps, batch_id, jobs, first=first)
    log.info(
        "retry round %d: %d PDFs in %d jobs (%d new), %d failed at once",
        round_,
        len(members),
        len(jobs),
        added,
        len(gone),
        extra={"batch_id": batch_id},
    )
    return f"{len(members)} PDFs"


async def _give_up(deps: Deps, batch_id: str, reason: str) -> str:
    """Out of tries: the round's undecided files fail with the last error, the batch ends."""
    names = await deps.files.retrying(batch_id)
    todo = await deps.lifecycle.reads.unrecorded(batch_id, sorted(names))
    await record_outcomes(
        deps, batch_id, {FileRef(batch_id, i, names[i]): failed(reason) for i in todo}
    )
    return f"{len(todo)} failed: {reason}"


async def _first_chunk(deps: Deps, batch_id: str, round_: int) -> int:
    if not deps.settings.dispatch_fair:
        return 0
    return await chunks_before(deps.redis, deps.settings.queue_name, batch_id, f"round:{round_}")
