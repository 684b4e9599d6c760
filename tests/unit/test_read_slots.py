"""A tenant's read slots: its own cap, a bounded wait, first come first served, nothing leaks."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from pdfqueue.domain.errors import QuotaExceeded
from pdfqueue_api.read_slots import WAITERS_PER_SLOT, TenantSlots
from pdfqueue_dev.processes import wait_until_async


def slots(limit: int = 2) -> TenantSlots:
    return TenantSlots("concurrent_reads", limit, retry_after_s=1)


async def until_waiting(share_of: TenantSlots, tenant: str, waiters: int) -> None:
    await wait_until_async(
        lambda: len(share_of.shares[tenant].waiters) >= waiters, "waiters", 5, interval_s=0
    )


async def test_past_its_cap_a_tenant_waits_then_gets_429_and_others_pass() -> None:
    reads = slots()
    async with reads.held("a"), reads.held("a"):
        with pytest.raises(QuotaExceeded) as refused:
            async with reads.held("a", wait_s=0.05):
                pass
        assert refused.value.headers() == {"Retry-After": "1"}
        assert str(refused.value) == "quota concurrent_reads (2) is used up; retry in 1 s"
        async with reads.held("b"), reads.held("b"):  # another tenant has its own share
            assert reads.holding("b") == 2
        assert reads.holding("a") == 2
        assert not reads.shares["a"].waiters  # the refused wait left nothing behind
    assert reads.shares == {}


async def test_a_freed_slot_goes_to_the_longest_waiter() -> None:
    reads, order = slots(1), []

    async def read(name: str) -> None:
        async with reads.held("a", wait_s=None):
            order.append(name)

    async with reads.held("a"):
        first = asyncio.create_task(read("first"))
        await until_waiting(reads, "a", 1)
        second = asyncio.create_task(read("second"))
        await until_waiting(reads, "a", 2)
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    assert reads.shares == {}


async def test_a_cancelled_waiter_frees_its_place_and_takes_no_slot() -> None:
    reads = slots(1)
    async with reads.held("a"):
        gone = asyncio.create_task(reads.held("a", wait_s=None).__aenter__())
        await until_waiting(reads, "a", 1)
        gone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
    assert reads.shares == {}  # the freed slot was not handed to the cancelled waiter


async def test_the_queue_of_waiters_is_bounded() -> None:
    reads = slots(1)
    async with reads.held("a"):
        waiting = [
            asyncio.create_task(reads.held("a", wait_s=30).__aenter__())
            for _ in range(WAITERS_PER_SLOT)
        ]
        await until_waiting(reads, "a", WAITERS_PER_SLOT)
        with pytest.raises(QuotaExceeded):  # at once, not after its 30 s wait
            async with asyncio.timeout(5), reads.held("a", wait_s=30):
                pass
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    assert reads.shares == {}
