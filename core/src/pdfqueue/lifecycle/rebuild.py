"""Putting back what Redis lost of a running batch, from its durable rows in PostgreSQL.
`pdfqueue.recovery` finds such batches and decides when; this writes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdfqueue.domain import keys
from pdfqueue.domain.models import TERMINAL, BatchStatus, BatchSummary
from pdfqueue.observability import metrics
from pdfqueue.stores.redis.queue import Job, enqueue, forget_results

if TYPE_CHECKING:
    from pdfqueue.lifecycle.transitions import Lifecycle

log = logging.getLogger(__name__)


async def rebuild(
    lifecycle: Lifecycle, batch_id: str, *, state: bool, stale: bool, work: bool, token: int
) -> Rebuilt:
    """PostgreSQL says the batch runs but Redis lost some of it: put back its live state
    (`state`: missing; `stale`: behind PostgreSQL's counts while no work is queued) and
    its work (`work`: none queued while files lack an outcome), from the durable rows.

    The work goes back as one job: `ingest` for a batch never listed; else `recover`
    (the worker lists the ZIP again and queues, under their usual ids, the jobs of the
    files without an outcome). `token` names the recover job; the caller holds the
    batch's rebuild lock, so two rebuilds never queue two. A batch every file of which
    has an outcome completes here instead, and one Redis says has ended is settled.
    """
    row = await lifecycle.batches.get(batch_id)
    if row is None or row.summary.status in TERMINAL:
        return Rebuilt(batch_id, row.tenant if row else "", ())
    what: list[str] = []
    if (state or stale) and await lifecycle.restore(batch_id, stale=stale):
        what.append("state")
    live = await lifecycle.state.read(batch_id)
    settled = live is not None and live.summary.status in TERMINAL
    if live is not None and settled:
        if live.summary.status is BatchStatus.COMPLETED:
            await lifecycle.completed(batch_id, first=bool(what))
        else:
            await lifecycle.settle(batch_id)
        work = False
    if work:
        if row.summary.total_files is None:
            job = Job(
                keys.ingest_job(batch_id),
                "ingest",
                {"batch_id": batch_id, "source": row.source_key},
            )
            what.append("ingest")
        else:
            job = Job(
                keys.recover_job(batch_id, token),
                "recover",
                {"batch_id": batch_id, "source": row.source_key},
            )
            what.append("jobs")
        await forget_results(lifecycle.redis, [job.job_id])  # an ended ingest's, lost work
        await enqueue(lifecycle.redis, lifecycle.queue_name, [job])
    summary = live.summary if live else row.summary
    for each in what:
        metrics.batch_rebuilt(each)
    if what:
        log.warning(
            "batch rebuilt from PostgreSQL (%s): tenant %s, %s of %s files recorded",
            "+".join(what),
            row.tenant,
            summary.processed,
            "?" if summary.total_files is None else summary.total_files,
            extra={"batch_id": batch_id},
        )
    return Rebuilt(batch_id, row.tenant, tuple(what), summary, settled=settled)


@dataclass(frozen=True)
class Rebuilt:
    """What `rebuild` put back for one batch (`what`: some of
    metrics.REBUILT), and the batch as it stands afterwards."""

    batch_id: str
    tenant: str
    what: tuple[str, ...]
    summary: BatchSummary | None = None
    settled: bool = False
    """The batch had ended in Redis only and its end is now recorded in PostgreSQL."""
