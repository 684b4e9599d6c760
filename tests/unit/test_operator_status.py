"""A PdfBatch's status from a batch summary: counters, phase, conditions and their times."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pdfqueue.domain.models import BatchStatus, BatchSummary
from pdfqueue_operator import status
from pdfqueue_operator.status import ACCEPTED, FINISHED, progress, rejected, with_condition

EARLIER = "2024-01-01T00:00:00Z"


def summary(state: BatchStatus, **fields: Any) -> BatchSummary:
    counts = {
        "total_files": 10,
        "processed": 4,
        "linked": 2,
        "skipped_no_match": 1,
        "skipped_already_exists": 0,
        "failed": 1,
        "ignored": 3,
    }
    return BatchSummary(
        batch_id="b1",
        status=state,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        **(counts | fields),
    )


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = {c["type"]: c for c in conditions}
    assert len(found) == len(conditions), conditions  # one condition per type
    return found


@pytest.fixture
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> str:
    """The status module's clock, fixed: transition times become comparable."""
    now = "2024-06-01T12:00:00Z"
    monkeypatch.setattr(status, "now_iso", lambda: now)
    return now


def test_now_iso_is_rfc3339_utc_to_the_second() -> None:
    stamp = status.now_iso()
    assert stamp.endswith("Z")
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert parsed.microsecond == 0
    assert parsed.tzinfo is not None
    assert parsed.utcoffset() is not None
    assert parsed.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_a_running_batch_shows_its_counters_in_camel_case(frozen_now: str) -> None:
    got = progress(summary(BatchStatus.PROCESSING), generation=3, conditions=None)
    conditions = by_type(got.pop("conditions"))
    assert got == {
        "phase": "PROCESSING",
        "batchId": "b1",
        "totalFiles": 10,
        "processed": 4,
        "linked": 2,
        "skippedNoMatch": 1,
        "skippedAlreadyExists": 0,
        "skippedAmbiguous": 0,
        "failed": 1,
        "ignored": 3,
        "message": "4 of 10 files processed",
        "observedGeneration": 3,
    }
    assert conditions == {
        ACCEPTED: {
            "type": ACCEPTED,
            "status": "True",
            "reason": "Queued",
            "message": "batch b1 queued",
            "lastTransitionTime": frozen_now,
            "observedGeneration": 3,
        },
        FINISHED: {
            "type": FINISHED,
            "status": "False",
            "reason": "Processing",
            "message": "not finished yet",
            "lastTransitionTime": frozen_now,
            "observedGeneration": 3,
        },
    }


def test_before_the_zip_is_read_the_total_is_left_out() -> None:
    got = progress(summary(BatchStatus.PENDING, total_files=None, processed=0), None, None)
    assert "totalFiles" not in got
    assert "observedGeneration" not in got
    assert got["message"] == "waiting for a worker to read the ZIP"
    assert by_type(got["conditions"])[FINISHED]["reason"] == "Pending"
    assert all("observedGeneration" not in c for c in got["conditions"])


NO_PDF = "the ZIP holds 2 files and none is a PDF (1 .docx, 1 .txt)"


@pytest.mark.parametrize(
    ("state", "error", "code", "reason", "message"),
    [
        (BatchStatus.COMPLETED, None, None, "Completed", "completed: 4 files processed"),
        (BatchStatus.CANCELLED, None, None, "Cancelled", "cancelled: 4 files processed"),
        (BatchStatus.FAILED, "not a ZIP archive", None, "Failed", "not a ZIP archive"),
        (BatchStatus.FAILED, NO_PDF, "no_pdf_members", "NoPdfMembers", NO_PDF),
    ],
)
def test_a_terminal_batch_is_finished_with_its_reason(
    state: BatchStatus, error: str | None, code: str | None, reason: str, message: str
) -> None:
    got = progress(summary(state, error=error, reason=code), generation=1, conditions=None)
    assert got["phase"] == state.value
    assert got["message"] == message
    finished = by_type(got["conditions"])[FINISHED]
    assert (finished["status"], finished["reason"], finished["message"]) == (
        "True",
        reason,
        message,
    )


def test_a_condition_keeps_its_transition_time_until_its_status_changes(frozen_now: str) -> None:
    old = [
        {"type": ACCEPTED, "status": "True", "reason": "Queued", "lastTransitionTime": EARLIER},
        {"type": "Other", "status": "True", "reason": "Theirs", "lastTransitionTime": EARLIER},
    ]
    same = by_type(with_condition(old, ACCEPTED, True, "Queued", "again", generation=None))
    assert same[ACCEPTED]["lastTransitionTime"] == EARLIER  # same status: the time stays
    assert same[ACCEPTED]["message"] == "again"
    assert same["Other"] == old[1]  # someone else's condition is kept as it was
    flipped = by_type(with_condition(old, ACCEPTED, False, "Nope", "refused", generation=None))
    assert flipped[ACCEPTED]["lastTransitionTime"] == frozen_now
    assert flipped[ACCEPTED]["status"] == "False"
    assert old[0]["status"] == "True"  # the input is not modified


def test_finishing_moves_only_the_finished_condition(frozen_now: str) -> None:
    running = progress(summary(BatchStatus.PROCESSING), 1, None)["conditions"]
    for c in running:
        c["lastTransitionTime"] = EARLIER
    done = by_type(progress(summary(BatchStatus.COMPLETED), 1, running)["conditions"])
    assert done[ACCEPTED]["lastTransitionTime"] == EARLIER
    assert done[FINISHED]["lastTransitionTime"] == frozen_now


def test_a_refusal_that_may_pass_leaves_the_batch_pending() -> None:
    got = rejected("SourceNotFound", "no such object", 2, None, final=False)
    assert got["phase"] == "PENDING"
    assert got["message"] == "no such object"
    assert got["observedGeneration"] == 2
    conditions = by_type(got["conditions"])
    assert set(conditions) == {ACCEPTED}
    assert (conditions[ACCEPTED]["status"], conditions[ACCEPTED]["reason"]) == (
        "False",
        "SourceNotFound",
    )


def test_a_final_refusal_fails_and_finishes_the_batch() -> None:
    got = rejected("InvalidSource", "not an s3:// URL", None, None, final=True)
    assert got["phase"] == "FAILED"
    assert "observedGeneration" not in got
    conditions = by_type(got["conditions"])
    assert conditions[ACCEPTED]["status"] == "False"
    assert (conditions[FINISHED]["status"], conditions[FINISHED]["reason"]) == ("True", "Failed")
    assert conditions[FINISHED]["message"] == "not an s3:// URL"
