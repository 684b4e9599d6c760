"""The scaling decision: replicas from the queue backlog, as a pure function of its inputs.

Like the HPA: scale up at once; scale down only to the highest recommendation made during
the stabilization window, so a backlog that dips for a moment does not cost a cold start.
Scale to zero is a separate, longer rule (KEDA's cooldown): with `min-replicas: 0`, one
replica stays while the queue was busy less than `idle-cooldown-seconds` ago.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pdfqueue.domain.errors import PermanentError

ANNOTATION_PREFIX = "pdfqueue.io/"
DEFAULT_MAX_REPLICAS = 10
DEFAULT_STABILIZATION_S = 300.0  # the HPA's default scale-down window
DEFAULT_IDLE_COOLDOWN_S = 300.0  # KEDA's default cooldownPeriod


class InvalidPolicy(PermanentError):
    """A Deployment's pdfqueue.io/* annotations cannot be used; the operator leaves it alone."""


@dataclass(frozen=True)
class ScalePolicy:
    """One worker Deployment's scaling settings (its pdfqueue.io/* annotations)."""

    queue: str
    target_per_replica: int
    min_replicas: int = 0
    max_replicas: int = DEFAULT_MAX_REPLICAS
    scale_down_stabilization_s: float = DEFAULT_STABILIZATION_S
    idle_cooldown_s: float = DEFAULT_IDLE_COOLDOWN_S

    @classmethod
    def from_annotations(
        cls, annotations: Mapping[str, str], *, queue: str, target_per_replica: int
    ) -> ScalePolicy:
        """Read the annotations; `queue` and `target_per_replica` are the defaults for those."""

        def read(name: str, default: float, kind: type[int] | type[float]) -> float:
            raw = annotations.get(ANNOTATION_PREFIX + name)
            if raw is None:
                return default
            try:
                value = kind(raw)
            except ValueError:
                noun = "an integer" if kind is int else "a number"
                raise InvalidPolicy(f"{ANNOTATION_PREFIX}{name}: {raw!r} is not {noun}") from None
            if value < 0:
                raise InvalidPolicy(f"{ANNOTATION_PREFIX}{name}: {raw!r} is negative")
            return value

        policy = cls(
            queue=annotations.get(ANNOTATION_PREFIX + "queue") or queue,
            target_per_replica=int(read("target-per-replica", target_per_replica, int)),
            min_replicas=int(read("min-replicas", 0, int)),
            max_replicas=int(read("max-replicas", DEFAULT_MAX_REPLICAS, int)),
            scale_down_stabilization_s=read(
                "scale-down-stabilization-seconds", DEFAULT_STABILIZATION_S, float
            ),
            idle_cooldown_s=read("idle-cooldown-seconds", DEFAULT_IDLE_COOLDOWN_S, float),
        )
        if policy.target_per_replica < 1:
            raise InvalidPolicy(f"{ANNOTATION_PREFIX}target-per-replica must be at least 1")
        if policy.min_replicas > policy.max_replicas:
            msg = (
                f"{ANNOTATION_PREFIX}min-replicas ({policy.min_replicas}) exceeds"
                f" max-replicas ({policy.max_replicas})"
            )
            raise InvalidPolicy(msg)
        return policy


@dataclass(frozen=True)
class History:
    """What the decision remembers between ticks.

    `recommendations` holds (time, replicas), newest last, pruned to what can still be the
    window's maximum: an entry followed by one at least as high can never be, so the tuple
    stays short (it decreases from oldest to newest).
    """

    recommendations: tuple[tuple[float, int], ...] = ()
    last_busy: float | None = None
    """When the backlog was last non-empty (None: not since the operator started)."""


@dataclass(frozen=True)
class Decision:
    desired: int
    reason: str
    history: History = field(repr=False)


def first_sight(now: float, current: int) -> History:
    """History for a Deployment the operator has not seen yet (for instance after a restart).

    Its current replicas count as a recommendation made now, and as busy if non-zero, so a
    restarted operator waits a full window (and cooldown) before scaling anything down.
    """
    return History(((now, current),), now if current > 0 else None)


def decide(
    now: float, backlog: int, current: int, history: History | None, policy: ScalePolicy
) -> Decision:
    """Replicas for `backlog` jobs (ready or running) given `current` replicas.

    `now` is any monotonic clock in seconds; pass the returned history to the next call.
    """
    history = history or first_sight(now, current)
    last_busy = now if backlog > 0 else history.last_busy
    needed = math.ceil(backlog / policy.target_per_replica)
    recommendation = min(max(needed, policy.min_replicas), policy.max_replicas)

    window_start = now - policy.scale_down_stabilization_s
    kept = [(t, r) for t, r in history.recommendations if t > window_start and r > recommendation]
    recommendations = (*kept, (now, recommendation))
    stabilized = recommendations[0][1]  # the window's maximum (see History)

    idle_s = math.inf if last_busy is None else now - last_busy
    warm = policy.max_replicas > 0 and idle_s < policy.idle_cooldown_s
    floor = 1 if warm else 0  # recommendation already includes min_replicas
    new_history = History(recommendations, last_busy)
    load = f"backlog {backlog} at {policy.target_per_replica}/replica"

    if recommendation > current:
        capped = " (max-replicas)" if needed > policy.max_replicas else ""
        reason = f"{load} needs {recommendation}{capped}: scale up from {current} at once"
        return Decision(recommendation, reason, new_history)
    down_to = max(stabilized, floor)
    if down_to < current:
        if down_to == 0:
            why = f"idle for {idle_s:.0f}s (cooldown {policy.idle_cooldown_s:g}s)"
        elif down_to == floor and stabilized < floor:
            why = f"keeping one warm until idle for {policy.idle_cooldown_s:g}s"
        else:
            why = f"highest in the last {policy.scale_down_stabilization_s:g}s"
        reason = f"{load} needs {recommendation}; {why}: scale down from {current} to {down_to}"
        return Decision(down_to, reason, new_history)
    if stabilized > recommendation:
        reason = f"{load} needs {recommendation}; holding {current} for the stabilization window"
    elif floor > recommendation:
        reason = f"{load} needs {recommendation}; holding {current} for the idle cooldown"
    else:
        reason = f"{load} needs {recommendation}: holding {current}"
    return Decision(current, reason, new_history)
