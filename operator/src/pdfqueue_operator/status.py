"""A PdfBatch's `.status`: the batch's counters in camelCase, phase, and standard conditions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic.alias_generators import to_camel

from pdfqueue.domain.models import COUNTERS, BatchStatus, BatchSummary

ACCEPTED = "Accepted"
"""True once the batch is registered and queued; False says why it cannot be."""
FINISHED = "Finished"
"""True once the batch is terminal; its reason is Completed, Failed or Cancelled."""

Condition = dict[str, Any]


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def with_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    generation: int | None,
) -> list[Condition]:
    """`conditions` with `type_` set; its transition time moves only when its status does."""
    value = "True" if status else "False"
    old = next((c for c in conditions or () if c.get("type") == type_), None)
    changed_at = old["lastTransitionTime"] if old and old.get("status") == value else now_iso()
    new: Condition = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": changed_at,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    return [*(dict(c) for c in conditions or () if c.get("type") != type_), new]


def progress(
    summary: BatchSummary, generation: int | None, conditions: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """The status of an accepted batch, as much as is known of it."""
    state = summary.status
    queued = f"batch {summary.batch_id} queued"
    accepted = with_condition(conditions, ACCEPTED, True, "Queued", queued, generation=generation)
    if state in {BatchStatus.PENDING, BatchStatus.PROCESSING}:
        finished = with_condition(
            accepted, FINISHED, False, state.title(), "not finished yet", generation=generation
        )
        message = (
            f"{summary.processed} of {summary.total_files} files processed"
            if summary.total_files is not None
            else "waiting for a worker to read the ZIP"
        )
    else:
        message = summary.error or f"{state.lower()}: {summary.processed} files processed"
        why = state.title()
        if state is BatchStatus.FAILED and summary.reason:  # no_pdf_members -> NoPdfMembers
            why = "".join(part.title() for part in summary.reason.split("_"))
        finished = with_condition(accepted, FINISHED, True, why, message, generation=generation)
    status: dict[str, Any] = {
        "phase": state.value,
        "batchId": summary.batch_id,
        **{to_camel(c): getattr(summary, c) for c in ("processed", *COUNTERS, "ignored")},
        "message": message,
        "conditions": finished,
    }
    if summary.total_files is not None:
        status["totalFiles"] = summary.total_files
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def rejected(
    reason: str,
    message: str,
    generation: int | None,
    conditions: Sequence[Mapping[str, Any]] | None,
    *,
    final: bool,
) -> dict[str, Any]:
    """The status of a batch that cannot be queued: FAILED if `final`, else still PENDING."""
    accepted = with_condition(conditions, ACCEPTED, False, reason, message, generation=generation)
    status: dict[str, Any] = {
        "phase": (BatchStatus.FAILED if final else BatchStatus.PENDING).value,
        "message": message,
        "conditions": accepted,
    }
    if final:
        status["conditions"] = with_condition(
            accepted, FINISHED, True, "Failed", message, generation=generation
        )
    if generation is not None:
        status["observedGeneration"] = generation
    return status
