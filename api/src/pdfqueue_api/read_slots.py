"""Per-tenant read slots of one API process: a tenant's reads wait for its own slots, never
for another tenant's, and get 429 with Retry-After when they stay taken."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from pdfqueue.domain.errors import QuotaExceeded

SLOT_WAIT_S = 1.0
"""How long a read waits for a slot of its tenant before it is answered 429: long enough
for a burst of quick reads to pass one after the other, short enough to hold nothing."""
WAITERS_PER_SLOT = 4
"""Reads of one tenant that may wait, per slot; one more is answered 429 at once."""


@dataclass(eq=False)
class _Share:
    """One tenant's slots: how many are held, and who waits for one (first come first)."""

    held: int = 0
    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


@dataclass
class TenantSlots:
    """At most `limit` slots per tenant for one kind of read; a freed slot goes straight to
    the tenant's longest waiter, so no newcomer overtakes it."""

    quota: str
    """The quota's name in the 429's detail (`concurrent_reads`, `concurrent_reports`)."""
    limit: int
    retry_after_s: int
    shares: dict[str, _Share] = field(default_factory=dict)
    """Tenants holding or waiting for a slot; a tenant with neither is forgotten."""

    @asynccontextmanager
    async def held(self, tenant: str, *, wait_s: float | None = SLOT_WAIT_S) -> AsyncIterator[None]:
        """Hold one of `tenant`'s slots while the block runs; QuotaExceeded if none is free
        within `wait_s` (None: wait as long as it takes, for a read already admitted)."""
        await self._take(tenant, wait_s)
        try:
            yield
        finally:
            self._free(tenant)

    def holding(self, tenant: str) -> int:
        share = self.shares.get(tenant)
        return share.held if share is not None else 0

    async def _take(self, tenant: str, wait_s: float | None) -> None:
        share = self.shares.setdefault(tenant, _Share())
        if share.held < self.limit:  # a live waiter exists only while every slot is held
            share.held += 1
            return
        if wait_s is not None and len(share.waiters) >= self.limit * WAITERS_PER_SLOT:
            raise self._refused()
        waiter = asyncio.get_running_loop().create_future()
        share.waiters.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._free(tenant)  # handed a slot just as the wait ended: pass it on
            elif waiter in share.waiters:
                share.waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise self._refused() from None
            raise

    def _free(self, tenant: str) -> None:
        share = self.shares[tenant]
        while share.waiters:
            waiter = share.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands: `held` stays
                return
        share.held -= 1
        if not share.held:
            del self.shares[tenant]

    def _refused(self) -> QuotaExceeded:
        return QuotaExceeded(self.quota, self.limit, self.retry_after_s)
