"""The leader election's rules, pure: when a standby may take a Lease, how long a leader may act.

The model is client-go's (controller-runtime, KEDA). Every time is the local monotonic clock:
nodes' clocks need not agree, only run at about the same rate.

- A standby notes when it first saw each version of the Lease. It may take the Lease once it
  has seen the same version for the holder's lease duration (nobody renewed it), or at once
  when the Lease names no holder (the last leader released it on its way out).
- A leader that sent a renewal at `t` and had it accepted may act until `t + renew deadline`.
  The server wrote that renewal after `t`, and any standby saw it even later, so no standby
  takes over before `t + lease duration`. Between the two the leader stops: the margin that
  the settings enforce (pdfqueue.domain.settings.LEASE_STOP_MARGIN_S).
- Takeover after a leader vanished without releasing: the standby saw its last renewal at
  most one poll after it was made, waits one lease duration from then, and takes the Lease
  on its next poll: at most `lease duration + 2 polls` after the leader's last renewal.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from pdfqueue.domain.settings import LEASE_JITTER, Settings


@dataclass(frozen=True)
class LeaseTiming:
    duration_s: int
    renew_deadline_s: float
    retry_period_s: float
    jitter: float = LEASE_JITTER

    @classmethod
    def of(cls, settings: Settings) -> LeaseTiming:
        return cls(
            settings.operator_lease_duration_s,
            settings.operator_lease_renew_deadline_s,
            settings.operator_lease_retry_period_s,
        )

    def poll_delay_s(self, random: float) -> float:
        """The wait before the next look at the Lease, for `random` in [0, 1)."""
        return self.retry_period_s * (1 + self.jitter * random)

    @property
    def takeover_bound_s(self) -> float:
        """Longest time from a leader's last renewal to a standby holding the Lease."""
        return self.duration_s + 2 * self.retry_period_s * (1 + self.jitter)

    @property
    def stop_budget_s(self) -> float:
        """Time a leader past its renew deadline has to stop before a standby may take over."""
        return self.duration_s - self.renew_deadline_s


@dataclass(frozen=True)
class LeaseRecord:
    """What the Lease says (its spec), and its version."""

    version: str
    holder: str | None
    duration_s: int | None
    transitions: int
    acquired: datetime | None = None
    renewed: datetime | None = None


@dataclass(frozen=True)
class Observation:
    """The Lease as a candidate last saw it, and since when (monotonic) it has not changed."""

    record: LeaseRecord
    since: float

    def then(self, record: LeaseRecord, now: float) -> Observation:
        """This observation after reading `record` at `now`."""
        return self if record.version == self.record.version else Observation(record, now)


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    return Observation(record, now) if previous is None else previous.then(record, now)


def may_take(seen: Observation, now: float, me: str, timing: LeaseTiming) -> bool:
    """Whether `me` may write itself into the Lease now (the write still needs its version)."""
    holder = seen.record.holder
    if not holder or holder == me:
        return True
    duration = seen.record.duration_s or timing.duration_s
    return now >= seen.since + duration


def claimed(
    previous: LeaseRecord | None, me: str, now: datetime, timing: LeaseTiming
) -> LeaseRecord:
    """The record `me` writes to take or renew the Lease (its version is the one it replaces)."""
    if previous is None:
        return LeaseRecord("", me, timing.duration_s, 0, now, now)
    if previous.holder == me:
        return replace(previous, duration_s=timing.duration_s, renewed=now)
    return LeaseRecord(previous.version, me, timing.duration_s, previous.transitions + 1, now, now)


def released(previous: LeaseRecord, now: datetime) -> LeaseRecord:
    """What a leader leaves behind on its way out: no holder, for a standby to take at once."""
    return replace(previous, holder=None, duration_s=1, acquired=now, renewed=now)


@dataclass
class Term:
    """A leader's hold on the Lease: it acts until its renew deadline, counted from the send
    time of its last renewal that the server accepted."""

    timing: LeaseTiming
    until: float = float("-inf")

    def renewed(self, sent_at: float) -> None:
        self.until = max(self.until, sent_at + self.timing.renew_deadline_s)

    def valid(self, now: float) -> bool:
        return now < self.until

    def left_s(self, now: float) -> float:
        return self.until - now

    def end(self) -> None:
        self.until = float("-inf")
