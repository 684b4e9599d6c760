"""The operator's leader election on a `coordination.k8s.io/v1` Lease (rules: lease.py).

`campaign` returns once this process holds the Lease; `hold` renews it and returns when the
term is over (a renewal not accepted before the renew deadline, or another holder); `release`
empties it on a graceful exit, so a standby takes over at its next poll instead of waiting a
lease duration. Every write carries the version it replaces: of two standbys that both see
the Lease free, the API server lets one write and answers the other 409.

Not `kubernetes.aio.leaderelection`: it times its deadlines by the wall clock, never releases,
keeps no transition count and lets a renewal run past the renew deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from datetime import UTC, datetime

from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from pdfqueue.observability import metrics
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

log = logging.getLogger(__name__)
MAX_REQUEST_S = 5.0


def identity_for(pod_name: str | None) -> str:
    """Unique per process: a restarted container never inherits a term it did not see."""
    return f"{pod_name or 'operator'}_{uuid.uuid4().hex[:6]}"


def _now() -> datetime:
    # The API server reads MicroTime with six fraction digits: isoformat drops them at 0 us.
    now = datetime.now(UTC)
    return now if now.microsecond else now.replace(microsecond=1)


class Elector:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming,
    ) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing
        self.term = Term(timing)
        self.seen: Observation | None = None
        self.last_look = time.monotonic()
        """When a look at (or write of) the Lease last completed, failed or not: liveness."""
        self.releasing = False

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    @property
    def holder(self) -> str | None:
        return self.seen.record.holder if self.seen else None

    def leading(self) -> bool:
        """Whether this process may act now: it holds the Lease and is within its term."""
        return not self.releasing and self.term.valid(time.monotonic())

    # --- the loops ---------------------------------------------------------------------------
    async def campaign(self) -> None:
        """Wait until this process holds the Lease."""
        log.info("%s: %s standing by for %s", self.where, self.identity, self.holder or "a leader")
        while not await self.try_take():  # noqa: ASYNC110 (polling is the protocol: a Lease has no events for us)
            await asyncio.sleep(self.timing.poll_delay_s(random.random()))  # noqa: S311 (jitter)
        self.announce("acquired")

    async def hold(self) -> None:
        """Renew every retry period; return (having stopped leading) when the term is over."""
        while True:
            await asyncio.sleep(self.timing.retry_period_s)
            if not self.term.valid(time.monotonic()):
                break
            await self.try_renew()
            if not self.term.valid(time.monotonic()):
                break
        self.term.end()
        metrics.operator_leading(False)
        self.announce("lost")

    def announce(self, what: str) -> None:
        leading = what == "acquired"
        metrics.operator_leading(leading)
        transitions = self.seen.record.transitions if self.seen else 0
        level = logging.INFO if leading or what == "released" else logging.WARNING
        log.log(level, "%s %s by %s (transitions %d)", self.where, what, self.identity, transitions)

    # --- one step each -----------------------------------------------------------------------
    async def try_take(self) -> bool:
        """One look at the Lease; take it if it is free or expired. True once held."""
        try:
            record = await self.read()
            now = time.monotonic()
            if record is None:
                return await self.write(None, now)
            self.seen = observe(self.seen, record, now)
            if not may_take(self.seen, now, self.identity, self.timing):
                return False
            return await self.write(record, now)
        except Exception as exc:  # the API server or the network: look again next poll
            log.warning("%s: could not look at it: %r", self.where, exc)
            return False
        finally:
            self.last_look = time.monotonic()

    async def try_renew(self) -> None:
        """One renewal, given no more time than the term has left."""
        sent = time.monotonic()
        left = min(self.term.left_s(sent), MAX_REQUEST_S)
        if left <= 0 or self.seen is None:
            return
        try:
            if await self.write(self.seen.record, sent, timeout_s=left):
                return
            record = await self.read(timeout_s=max(0.1, self.term.left_s(time.monotonic())))
            if record is not None:
                self.seen = observe(self.seen, record, time.monotonic())
            if record is None or record.holder != self.identity:
                self.term.end()  # another holder (or none at all): not ours any more
        except Exception as exc:  # tried again until the renew deadline
            log.warning("%s: renewal failed: %r", self.where, exc)
        finally:
            self.last_look = time.monotonic()

    async def release(self) -> None:
        """Leave the Lease without holder (if it is still ours), for a standby to take at once."""
        self.releasing = True
        metrics.operator_leading(False)
        for _ in range(2):  # once more if a renewal we gave up on had changed its version
            if self.seen is None or self.seen.record.holder != self.identity:
                return
            body = _lease(self.name, self.namespace, released(self.seen.record, _now()))
            try:
                await self.leases.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=MAX_REQUEST_S
                )
            except ApiException as exc:
                if exc.status != 409:
                    log.warning("%s: could not release it: %r", self.where, exc)
                    return
                record = await self.read()
                self.seen = None if record is None else Observation(record, time.monotonic())
                continue
            except Exception as exc:  # a standby then waits out the lease duration
                log.warning("%s: could not release it: %r", self.where, exc)
                return
            self.term.end()
            self.announce("released")
            return

    # --- the API calls -------------------------------------------------------------------------
    async def read(self, timeout_s: float = MAX_REQUEST_S) -> LeaseRecord | None:
        try:
            lease = await self.leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=timeout_s
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _record(lease)

    async def write(
        self, previous: LeaseRecord | None, sent: float, timeout_s: float = MAX_REQUEST_S
    ) -> bool:
        """Write this process as holder over `previous` (None: create). False on a conflict."""
        record = claimed(previous, self.identity, _now(), self.timing)
        body = _lease(self.name, self.namespace, record)
        try:
            if previous is None:
                done = await self.leases.create_namespaced_lease(
                    self.namespace, body, _request_timeout=timeout_s
                )
            else:
                done = await self.leases.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=timeout_s
                )
        except ApiException as exc:
            if exc.status == 409:  # someone else wrote it first (or created it)
                return False
            raise
        self.seen = Observation(_record(done), time.monotonic())
        self.term.renewed(sent)
        return True


def _lease(name: str, namespace: str, record: LeaseRecord) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, resource_version=record.version or None
        ),
        spec=client.V1LeaseSpec(
            holder_identity=record.holder,
            lease_duration_seconds=record.duration_s,
            lease_transitions=record.transitions,
            acquire_time=record.acquired,
            renew_time=record.renewed,
        ),
    )


def _record(lease: client.V1Lease) -> LeaseRecord:
    spec = lease.spec or client.V1LeaseSpec()
    meta = lease.metadata or client.V1ObjectMeta()
    return LeaseRecord(
        version=meta.resource_version or "",
        holder=spec.holder_identity or None,
        duration_s=spec.lease_duration_seconds,
        transitions=spec.lease_transitions or 0,
        acquired=spec.acquire_time,
        renewed=spec.renew_time,
    )
