"""The `ingest` task: list a batch's ZIP, fail what it rejects, and fan its PDFs out as jobs."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pdfqueue.domain import keys
from pdfqueue.domain.errors import DependencyRejected, PermanentError
from pdfqueue.domain.models import TERMINAL, BatchStatus, FileRef, failed
from pdfqueue.stores.redis.queue import Job
from pdfqueue_worker.archive import list_members, plan_slices
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


@observed_job("ingest", link=False)
@keeps_try_on_shutdown
async def ingest(ctx: dict[str, Any], *, batch_id: str, source: str) -> str:
    """List the ZIP, record what fails at once, and fan out one `process` job per PDF."""
    deps: Deps = ctx["deps"]
    try:
        async with asyncio.timeout(deps.settings.job_timeout_s):  # see `process`
            if await deps.lifecycle.reads.buried(batch_id):  # its erasure is accepted
                return ERASED
            if ctx["job_try"] <= deps.settings.max_tries:
                try:
                    return await _ingest(deps, batch_id, source)
                except DependencyRejected as exc:  # no try cures it: the batch fails now
                    log.error("ingest refused: %r", exc, extra={"batch_id": batch_id})
                    error, reason = f"ingest failed: {exc.reason}", exc.reason
            else:
                error = f"ingest gave up: {await last_try_error(deps, ctx)}"
                reason = "ingest_gave_up"
            await deps.lifecycle.fail(batch_id, error, reason=reason)
    except Exception as exc:
        raise await retry_later(deps, ctx, exc) from exc
    return error


async def _ingest(deps: Deps, batch_id: str, source: str) -> str:
    if await deps.lifecycle.reads.status(batch_id) in TERMINAL:
        await deps.lifecycle.settle(batch_id)  # whoever finished it may have died
        return "already finished"
    try:
        listing = await deps.storage.run(list_members, deps.storage.backend, source, deps.limits)
    except PermanentError as exc:
        log.warning("archive rejected: %s", exc, extra={"batch_id": batch_id})
        await deps.lifecycle.fail(batch_id, str(exc), reason=exc.reason)
        return f"rejected: {exc}"

    started = await deps.lifecycle.start(batch_id, listing.total_files, listing.ignored)
    if started is BatchStatus.FAILED:  # no PDF in it: the lifecycle failed the batch
        return f"no PDF among {len(listing.ignored)} files"
    if listing.rejected:
        rejected = {
            FileRef(batch_id, i, name): failed(why.reason) for i, name, why in listing.rejected
        }
        await record_outcomes(deps, batch_id, rejected)
    slices = plan_slices(listing.pdfs, deps.settings.pdfs_per_job, deps.settings.job_max_bytes)
    jobs = (
        Job(
            keys.process_job(batch_id, run[0].index),
            "process",
            {"batch_id": batch_id, "source": source, "members": [m.to_job() for m in run]},
            cost=len(run),
        )
        for run in slices
    )
    added = await submit(deps, batch_id, jobs)
    log.info(
        "ingested %d PDFs in %d jobs (%d new), %d rejected, %d ignored",
        len(listing.pdfs),
        len(slices),
        added,
        len(listing.rejected),
        len(listing.ignored),
        extra={"batch_id": batch_id},
    )
    return f"{len(listing.pdfs)} PDFs"
