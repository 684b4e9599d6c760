"""The operator's scaling decision, a pure function: up at once, down after the window, zero last."""

from __future__ import annotations

import pytest

from pdfqueue_operator.scale_decision import (
    Decision,
    History,
    InvalidPolicy,
    ScalePolicy,
    decide,
    first_sight,
)

POLICY = ScalePolicy(
    queue="q",
    target_per_replica=10,
    min_replicas=0,
    max_replicas=5,
    scale_down_stabilization_s=60,
    idle_cooldown_s=120,
)


def run(
    ticks: list[tuple[float, int]], current: int = 0, policy: ScalePolicy = POLICY
) -> list[int]:
    """Feed (time, backlog) ticks, applying each decision as the new current replicas."""
    history: History | None = None
    seen = []
    for now, backlog in ticks:
        decision = decide(now, backlog, current, history, policy)
        history, current = decision.history, decision.desired
        seen.append(current)
    return seen


def test_scales_up_at_once_to_the_backlog_over_the_target() -> None:
    assert run([(0, 0), (1, 1), (2, 11), (3, 35)]) == [0, 1, 2, 4]


def test_max_and_min_replicas_bound_the_recommendation() -> None:
    assert run([(0, 10_000)]) == [5]
    at_least_two = ScalePolicy("q", 10, min_replicas=2, max_replicas=5)
    assert run([(0, 0), (1, 5)], policy=at_least_two) == [2, 2]
    decision = decide(0, 10_000, 0, None, POLICY)
    assert "max-replicas" in decision.reason


def test_scale_down_waits_for_the_window_and_takes_its_maximum() -> None:
    ticks = [(0, 50), (10, 30), (20, 10), (59, 10), (61, 10), (71, 10), (81, 10)]
    # 5 until t=0 leaves the window (t>60), then 3 (t=10) until t>70, then 1.
    assert run(ticks) == [5, 5, 5, 5, 3, 1, 1]


def test_a_dip_shorter_than_the_window_changes_nothing() -> None:
    ticks = [(0, 40), (5, 0), (30, 0), (50, 40), (100, 40)]
    assert run(ticks) == [4, 4, 4, 4, 4]


def test_scale_to_zero_only_after_the_idle_cooldown() -> None:
    ticks = [(0, 20), (1, 0), (62, 0), (119, 0), (121, 0)]
    # after the window one replica stays warm; the last tick that saw work was t=0, so the
    # cooldown ends at t=120
    assert run(ticks) == [2, 2, 1, 1, 0]
    decision = decide(130, 0, 1, History(((60.0, 1),), last_busy=1.0), POLICY)
    assert decision.desired == 0
    assert "idle for 129s" in decision.reason


def test_new_backlog_during_the_cooldown_keeps_the_warm_replica() -> None:
    ticks = [(0, 5), (100, 0), (200, 3), (300, 0), (319, 0), (321, 0)]
    assert run(ticks) == [1, 1, 1, 1, 1, 0]


def test_a_restarted_operator_waits_a_full_window_before_scaling_down() -> None:
    seen = run([(1000, 0), (1030, 0), (1061, 0), (1121, 0)], current=4)
    assert seen == [4, 4, 1, 0]
    assert first_sight(5, 0) == History(((5, 0),), None)


def test_history_keeps_only_entries_that_can_still_be_the_maximum() -> None:
    history: History | None = None
    for now, backlog in [(0, 10), (1, 40), (2, 20), (3, 30), (4, 5)]:
        decision: Decision = decide(now, backlog, 4, history, POLICY)
        history = decision.history
    assert history is not None
    assert history.recommendations == ((1, 4), (3, 3), (4, 1))


def test_max_replicas_zero_parks_the_deployment() -> None:
    parked = ScalePolicy("q", 10, min_replicas=0, max_replicas=0)
    # a restart's first sight still holds the current replicas for one window
    assert run([(0, 500), (59, 500), (301, 500)], current=3, policy=parked) == [3, 3, 0]


def test_policy_from_annotations() -> None:
    policy = ScalePolicy.from_annotations(
        {
            "pdfqueue.io/queue": "other",
            "pdfqueue.io/min-replicas": "1",
            "pdfqueue.io/max-replicas": "20",
            "pdfqueue.io/target-per-replica": "64",
            "pdfqueue.io/scale-down-stabilization-seconds": "4.5",
            "pdfqueue.io/idle-cooldown-seconds": "30",
            "unrelated": "x",
        },
        queue="pdfqueue:queue",
        target_per_replica=32,
    )
    assert policy == ScalePolicy("other", 64, 1, 20, 4.5, 30.0)
    defaults = ScalePolicy.from_annotations({}, queue="pdfqueue:queue", target_per_replica=32)
    assert defaults == ScalePolicy("pdfqueue:queue", 32, 0, 10, 300.0, 300.0)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"pdfqueue.io/max-replicas": "ten"}, "max-replicas: 'ten' is not an integer"),
        ({"pdfqueue.io/idle-cooldown-seconds": "-1"}, "is negative"),
        ({"pdfqueue.io/target-per-replica": "0"}, "at least 1"),
        ({"pdfqueue.io/min-replicas": "3", "pdfqueue.io/max-replicas": "2"}, "exceeds"),
    ],
)
def test_bad_annotations_say_what_is_wrong(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidPolicy, match=message):
        ScalePolicy.from_annotations(annotations, queue="q", target_per_replica=8)
