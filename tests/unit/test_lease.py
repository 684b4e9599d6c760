"""The leader election's timing rules (pdfqueue_operator.lease), which need no API server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from pdfqueue.domain.settings import Settings
from pdfqueue_operator.lease import (
    LeaseRecord,
    LeaseTiming,
    Observation,
    Term,
    claimed,
    may_take,
    observe,
    released,
)

TIMING = LeaseTiming(duration_s=8, renew_deadline_s=5.0, retry_period_s=1.5)
NOW = datetime(2026, 12, 1, 21, 0, 0, 1, tzinfo=UTC)


def held(by: str | None, version: str = "1", transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(version, by, 8, transitions, NOW, NOW)


def test_the_defaults_take_over_within_15_s_and_leave_a_leader_time_to_stop() -> None:
    timing = LeaseTiming.of(Settings())
    assert timing == TIMING
    # 8 s + 2 polls of at most 1.65 s: the 15 s, with room for kopf to start
    assert timing.takeover_bound_s == pytest.approx(11.3)
    assert timing.stop_budget_s == 3.0
    assert timing.renew_deadline_s < timing.duration_s


def test_a_standby_waits_a_lease_duration_from_when_it_first_saw_a_version() -> None:
    seen = observe(None, held("a"), now=100.0)
    assert not may_take(seen, 107.9, "b", TIMING)
    assert may_take(seen, 108.0, "b", TIMING)
    # a renewal is a new version: the wait starts again from when it was seen
    renewed = observe(seen, held("a", version="2"), now=107.0)
    assert renewed.since == 107.0
    assert not may_take(renewed, 114.9, "b", TIMING)
    # the same version read again does not move the start
    assert observe(renewed, held("a", version="2"), now=110.0).since == 107.0


def test_the_holders_own_lease_duration_counts_and_a_released_lease_is_free_at_once() -> None:
    longer = Observation(LeaseRecord("1", "a", 30, 0), since=0.0)
    assert not may_take(longer, 29.0, "b", TIMING)  # a holder configured for 30 s keeps it
    free = Observation(released(held("a"), NOW), since=50.0)
    assert free.record.holder is None
    assert may_take(free, 50.0, "b", TIMING)


def test_taking_counts_a_transition_and_renewing_does_not() -> None:
    created = claimed(None, "a", NOW, TIMING)
    assert (created.holder, created.transitions, created.version) == ("a", 0, "")
    renewed = claimed(held("a", version="7", transitions=3), "a", NOW, TIMING)
    assert (renewed.holder, renewed.transitions, renewed.version) == ("a", 3, "7")
    taken = claimed(held("a", version="7", transitions=3), "b", NOW, TIMING)
    assert (taken.holder, taken.transitions, taken.version) == ("b", 4, "7")
    after_release = claimed(released(held("a", transitions=4), NOW), "b", NOW, TIMING)
    assert after_release.transitions == 5


def test_a_leader_acts_until_the_renew_deadline_counted_from_the_send_of_its_renewal() -> None:
    term = Term(TIMING)
    assert not term.valid(0.0)
    term.renewed(sent_at=10.0)  # accepted, whenever the answer came
    assert term.valid(14.9)
    assert not term.valid(15.0)
    # a standby saw that renewal at 10.0 at the earliest: it waits until 18.0 at least
    standby = observe(None, held("a"), now=10.0)
    assert may_take(standby, 18.0, "b", TIMING)
    assert not term.valid(18.0 - TIMING.stop_budget_s)
    term.renewed(sent_at=9.0)  # a late answer to an older renewal never shortens the term
    assert term.left_s(10.0) == 5.0
    term.end()
    assert not term.valid(10.0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"operator_lease_renew_deadline_s": 7.0}, "RENEW_DEADLINE_S (7) <= "),
        ({"operator_lease_retry_period_s": 5.0}, "RETRY_PERIOD_S (5) x 1.1 <"),
        ({"operator_lease_duration_s": 1}, "greater than or equal to 2"),
    ],
)
def test_lease_timing_that_could_give_two_leaders_is_refused(
    env: dict[str, float], message: str
) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Settings(**env)  # type: ignore[arg-type]
