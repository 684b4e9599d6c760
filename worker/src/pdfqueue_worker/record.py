"""Recording files' outcomes: durable rows first, then the once-only Redis counters."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pdfqueue import metrics
from pdfqueue.db import FileRow
from pdfqueue.models import BatchStatus, FileRef, Outcome
from pdfqueue.observe import stage
from pdfqueue.state import Recorded
from pdfqueue.tracing import file_event
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.notify import announce

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """What processing concluded for one file, before it is recorded."""

    outcome: Outcome
    reason: str | None = None
    user_id: int | None = None
    sha256: str | None = None
    stored: bool = False
    """The claim already wrote the durable row (in the same statement as the UPDATE)."""
    ocr: bool = False
    """Pages of the file were read by OCR (a column of the report)."""


def failed(reason: str) -> Decision:
    return Decision(Outcome.FAILED, reason)


async def record(deps: Deps, batch_id: str, decided: Mapping[FileRef, Decision]) -> list[Outcome]:
    """Record each file's outcome exactly once; returns the outcomes that count, in order.

    PostgreSQL is written first: a crash between the two writes leaves rows that the retry
    finds, so the retry reports the same outcomes and the Redis script counts each once.
    """
    rows = [
        FileRow(ref, d.outcome, d.reason, d.user_id, d.sha256, d.ocr)
        for ref, d in decided.items()
        if not d.stored
    ]
    stored = await deps.db.record_files(batch_id, rows)
    # what counts is what PostgreSQL holds: an earlier try's row wins over this try's decision
    final = [stored.get(ref.index, (d.outcome, d.reason)) for ref, d in decided.items()]
    pairs = [(ref.index, outcome) for ref, (outcome, _) in zip(decided, final, strict=True)]
    with stage("record"):
        codes, status = await deps.state.record(batch_id, pairs)
        if Recorded.MISSING in codes:
            await restore(deps, batch_id)
            codes, status = await deps.state.record(batch_id, pairs)
    for ref, (outcome, reason), code in zip(decided, final, codes, strict=True):
        file_event(ref.index, outcome.value, reason)
        if code in (Recorded.COUNTED, Recorded.COMPLETED_BATCH):
            metrics.document_counted(outcome, reason)
    if status == BatchStatus.COMPLETED.value:
        await deps.db.finish_batch(batch_id, BatchStatus.COMPLETED)
        await announce(deps, batch_id)  # again on a redelivery: the job id makes it once
        if Recorded.COMPLETED_BATCH in codes:
            metrics.batch_entered(BatchStatus.COMPLETED)
            log.info("batch completed", extra={"batch_id": batch_id})
    return [outcome for outcome, _ in final]


async def restore(deps: Deps, batch_id: str) -> None:
    """Live state expired mid-batch (it outlived its TTL): rebuild it from the durable rows."""
    found = await deps.db.batch(batch_id)
    if found is None:
        return
    summary, tenant, _ = found
    outcomes = await deps.db.outcomes(batch_id)
    if (
        summary.status is BatchStatus.PROCESSING
        and summary.total_files is not None
        and len(outcomes) >= summary.total_files
    ):
        summary = summary.model_copy(update={"status": BatchStatus.COMPLETED})
    log.warning("restoring expired live state", extra={"batch_id": batch_id})
    await deps.state.restore(summary, tenant, outcomes)
