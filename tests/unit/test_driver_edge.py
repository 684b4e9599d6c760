"""Every store raises pdfqueue's typed errors when its server is down, never the driver's."""

from __future__ import annotations

import inspect

import pytest
from redis.asyncio import Redis

from pdfqueue.domain.errors import RedisUnavailable
from pdfqueue.stores.redis.fair_dispatch import Dispatcher
from pdfqueue.stores.redis.state import BatchState
from pdfqueue_dev.processes import free_port

BATCH = "0" * 32


def nobody() -> Redis:
    """A client of a port nothing listens on."""
    return Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)


@pytest.mark.parametrize("store", [BatchState, Dispatcher])
def test_every_coroutine_method_of_a_redis_store_is_typed(store: type) -> None:
    methods = [m for m in vars(store).values() if inspect.iscoroutinefunction(m)]
    assert methods
    assert all(hasattr(m, "__wrapped__") for m in methods), store


async def test_live_state_says_redis_is_unavailable() -> None:
    redis = nobody()
    try:
        with pytest.raises(RedisUnavailable):
            await BatchState(redis, ttl_s=60).status(BATCH)
        with pytest.raises(RedisUnavailable):
            await BatchState(redis, ttl_s=60).unrecorded(BATCH, [0, 1])
    finally:
        await redis.aclose()
