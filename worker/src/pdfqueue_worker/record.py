"""Recording one file's outcome: durable row first, then the once-only Redis counters."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pdfqueue import metrics
from pdfqueue.models import BatchStatus, FileRef, Outcome
from pdfqueue.observe import stage
from pdfqueue.state import Recorded
from pdfqueue.tracing import annotate
from pdfqueue_worker.deps import Deps

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


def failed(reason: str) -> Decision:
    return Decision(Outcome.FAILED, reason)


async def record(deps: Deps, ref: FileRef, decision: Decision) -> Outcome:
    """Record the file's outcome exactly once; returns the outcome that counts.

    PostgreSQL is written first: a crash between the two writes leaves a row that the retry
    finds, so the retry reports the same outcome and the Redis script counts it once.
    """
    outcome = decision.outcome
    if not decision.stored:
        outcome, _ = await deps.db.record_file(
            ref, outcome, decision.reason, user_id=decision.user_id, sha256=decision.sha256
        )
    with stage("record"):
        code, status = await deps.state.record(ref.batch_id, ref.index, outcome)
        if code is Recorded.MISSING:
            await restore(deps, ref.batch_id)
            code, status = await deps.state.record(ref.batch_id, ref.index, outcome)
    annotate(outcome=outcome.value, reason=decision.reason)
    if code in (Recorded.COUNTED, Recorded.COMPLETED_BATCH):
        metrics.document_counted(outcome, decision.reason)
    if status == BatchStatus.COMPLETED.value:
        await deps.db.finish_batch(ref.batch_id, BatchStatus.COMPLETED)
        if code is Recorded.COMPLETED_BATCH:
            metrics.batch_entered(BatchStatus.COMPLETED)
            log.info("batch completed", extra={"batch_id": ref.batch_id})
    return outcome


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
