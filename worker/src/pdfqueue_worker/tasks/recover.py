"""The `recover` task: queue again the work of a batch that Redis lost (see pdfqueue.recovery)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pdfqueue.domain import keys
from pdfqueue.domain.errors import PermanentError
from pdfqueue.domain.models import TERMINAL, FileRef, failed
from pdfqueue.stores.redis.fair_dispatch import chunks_before
from pdfqueue.stores.redis.queue import Job, forget_results
from pdfqueue_worker.archive import Listing, list_members, plan_slices
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.fair_dispatch import submit
from pdfqueue_worker.observe import observed_job
from pdfqueue_worker.payload import Member
from pdfqueue_worker.tasks.attempt import (
    ERASED,
    keeps_try_on_shutdown,
    last_try_error,
    record_outcomes,
    retry_later,
)
from pdfqueue_worker.tasks.retry import UPLOAD_GONE

log = logging.getLogger(__name__)


@observed_job("recover", link=False)
@keeps_try_on_shutdown
async def recover(ctx: dict[str, Any], *, batch_id: str, source: str) -> str:
    """List the ZIP again and queue the jobs of the files still without an outcome.

    A first-round file's job is the one ingest made (same members, same id), so a job that
    did survive somewhere stays one job; a retry round's files are planned as `retry` plans
    them. Each job re-checks which of its files lack an outcome before it reads any.
    """
    deps: Deps = ctx["deps"]
    try:
        async with asyncio.timeout(deps.settings.job_timeout_s):
            if await deps.lifecycle.reads.buried(batch_id):  # its erasure is accepted
                return ERASED
            if ctx["job_try"] > deps.settings.max_tries:
                error = f"recovery gave up: {await last_try_error(deps, ctx)}"
                await deps.lifecycle.fail(batch_id, error, reason="ingest_gave_up")
                return error
            return await _recover(deps, ctx["job_id"], batch_id, source)
    except Exception as exc:
        raise await retry_later(deps, ctx, exc) from exc


async def _recover(deps: Deps, job_id: str, batch_id: str, source: str) -> str:
    row = await deps.batches.get(batch_id)
    if row is None:
        return "unknown batch"
    if row.summary.status in TERMINAL or await deps.lifecycle.reads.status(batch_id) in TERMINAL:
        await deps.lifecycle.settle(batch_id)
        return "already finished"
    try:
        listing = await deps.storage.run(list_members, deps.storage.backend, source, deps.limits)
    except PermanentError as exc:  # the ZIP expired or changed since ingest listed it
        log.warning("recover: archive unreadable: %s", exc, extra={"batch_id": batch_id})
        if row.summary.retries == 0:  # its files are known by the listing only
            await deps.lifecycle.fail(batch_id, f"recovery: {exc}", reason=exc.reason)
            return "archive unreadable"
        listing = Listing()
    done = await deps.files.outcomes(batch_id)
    retrying = await deps.files.retrying(batch_id)
    listed = {m.index for m in listing.pdfs}
    lost = {
        FileRef(batch_id, i, name): failed(why.reason)
        for i, name, why in listing.rejected
        if i not in done
    }
    lost |= {
        FileRef(batch_id, i, name): failed(UPLOAD_GONE)
        for i, name in retrying.items()
        if i not in listed and FileRef(batch_id, i, name) not in lost
    }
    jobs = _first_round(deps, batch_id, source, listing.pdfs, set(done) | set(retrying))
    jobs += _retry_round(
        deps, batch_id, source, listing.pdfs, retrying=retrying, round_=row.summary.retries
    )
    if lost:
        await record_outcomes(deps, batch_id, lost)
    # Their ids may have ended before (their results kept): they must run again.
    await forget_results(deps.redis, [j.job_id for j in jobs])
    first = 0
    if deps.settings.dispatch_fair:
        first = await chunks_before(deps.redis, deps.settings.queue_name, batch_id, job_id)
    added = await submit(deps, batch_id, jobs, first=first)
    files = sum(j.cost for j in jobs)
    log.info(
        "recovered: %d jobs (%d new) for %d files, %d failed at once",
        len(jobs),
        added,
        files,
        len(lost),
        extra={"batch_id": batch_id},
    )
    return f"{len(jobs)} jobs"


def _first_round(
    deps: Deps, batch_id: str, source: str, pdfs: list[Member], decided: set[int]
) -> list[Job]:
    """Ingest's own jobs (planned over every PDF, as ingest plans them) that hold a file
    without an outcome: the same ids and members."""
    s = deps.settings
    return [
        Job(
            keys.process_job(batch_id, run[0].index),
            "process",
            {"batch_id": batch_id, "source": source, "members": [m.to_job() for m in run]},
            cost=len(run),
        )
        for run in plan_slices(pdfs, s.pdfs_per_job, s.job_max_bytes)
        if any(m.index not in decided for m in run)
    ]


def _retry_round(
    deps: Deps,
    batch_id: str,
    source: str,
    pdfs: list[Member],
    *,
    retrying: dict[int, str],
    round_: int,
) -> list[Job]:
    """The jobs of the running retry round's files still `retrying`, planned as `retry`
    plans them."""
    if not retrying:
        return []
    s = deps.settings
    members = [m for m in pdfs if m.index in retrying]
    return [
        Job(
            keys.retry_process_job(batch_id, round_, run[0].index),
            "process",
            {"batch_id": batch_id, "source": source, "members": [m.to_job() for m in run]},
            cost=len(run),
        )
        for run in plan_slices(members, s.pdfs_per_job, s.job_max_bytes)
    ]
