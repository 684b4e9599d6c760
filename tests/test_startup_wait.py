"""A process started beside its database (new pods, side by side) waits for it: no crash loop."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from pdfqueue.domain.errors import DatabaseUnavailable
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime import connections as runtime
from pdfqueue.runtime.connections import Stores, worker_role
from pdfqueue_api import runtime as api_runtime
from pdfqueue_api.batch_feed import BatchFeed
from pdfqueue_api.runtime import ApiRuntime
from pdfqueue_dev.processes import free_port


async def _forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


async def test_the_worker_waits_for_postgresql_to_come_up(settings: Settings) -> None:
    real = urlsplit(settings.database_url)
    port = free_port()
    late = settings.model_copy(update={"database_url": _via(settings.database_url, port)})

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(real.hostname, real.port)
        await asyncio.gather(_forward(reader, up_writer), _forward(up_reader, writer))

    opening = asyncio.create_task(Stores.open(late, worker_role(late)))
    await asyncio.sleep(1.5)  # PostgreSQL "starts" only now: nothing listens before
    assert not opening.done()
    server = await asyncio.start_server(relay, "127.0.0.1", port)
    try:
        stores = await asyncio.wait_for(opening, 30)
        assert await stores.pool.fetchval("SELECT 1") == 1
        await stores.close()
    finally:
        server.close()


async def test_a_database_that_never_comes_is_an_error_in_the_end(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "STARTUP_WAIT_S", 1.0)
    dead = settings.model_copy(update={"database_url": _via(settings.database_url, free_port())})
    with pytest.raises(DatabaseUnavailable):
        await Stores.open(dead, worker_role(dead))


async def test_an_api_start_that_fails_half_way_closes_what_it_opened(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lifespan never runs `close` after a failed start: `start` itself must give back the
    pool, the Redis client and the background loops it had opened, then re-raise."""
    opened: list[Stores] = []
    real_open = Stores.open

    async def open_and_keep(*args: Any, **kwargs: Any) -> Stores:
        stores = await real_open(*args, **kwargs)
        opened.append(stores)
        return stores

    def broken_start(self: BatchFeed) -> None:
        raise RuntimeError("the feed cannot start")

    monkeypatch.setattr(api_runtime.Stores, "open", open_and_keep)
    monkeypatch.setattr(api_runtime.BatchFeed, "start", broken_start)
    with pytest.raises(RuntimeError, match="the feed cannot start"):
        await ApiRuntime.start(settings)
    (stores,) = opened
    assert stores.pool.is_closing()
    redis_connections = stores.redis.connection_pool._available_connections
    assert redis_connections, "start talked to Redis (the durability check)"
    assert not any(c.is_connected for c in redis_connections)
    loops = [t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("pdfqueue-")]
    assert loops == []  # the gauges it had started are stopped


async def test_stores_that_fail_to_open_close_the_pool_they_had_opened(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storage URL of no known scheme is found after PostgreSQL's pool is open: the error
    says what is wrong, and the pool is closed rather than left holding its connections."""
    pools: list[asyncpg.Pool] = []
    real_connect = runtime.connect

    async def connect_and_keep(*args: Any, **kwargs: Any) -> asyncpg.Pool:
        pool = await real_connect(*args, **kwargs)
        pools.append(pool)
        return pool

    monkeypatch.setattr(runtime, "connect", connect_and_keep)
    wrong = settings.model_copy(update={"storage_url": "gs://pdfqueue/"})
    with pytest.raises(ValueError, match="must start with s3:// or file://"):
        await Stores.open(wrong, worker_role(wrong))
    (pool,) = pools
    assert pool.is_closing()
