"""A Redis that drops the connection under a WATCH: redis-py then raises WatchError, which
must count as a lost connection (reconnect, retry later), never as "a watched key changed".

The server here speaks just enough RESP for redis-py: it answers EXISTS with 0 and every
other command with +OK, and closes the connection at a given command once a WATCH is held,
as a Redis killed mid-transaction does (arq's `start_jobs` and `BatchState.restore` both
WATCH).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from redis import exceptions as rx
from redis.asyncio import Redis

from pdfqueue.domain.errors import RedisUnavailable
from pdfqueue.domain.models import BatchStatus, BatchSummary
from pdfqueue.stores.driver_errors import redis_connection_lost
from pdfqueue.stores.redis.state import BatchState
from pdfqueue_worker import app


async def _command(reader: asyncio.StreamReader) -> list[bytes]:
    """One RESP array of bulk strings (what redis-py sends)."""
    head = await reader.readline()
    if not head.startswith(b"*"):
        raise ConnectionError("not a command")
    args = []
    for _ in range(int(head[1:])):
        size = int((await reader.readline())[1:])
        args.append((await reader.readexactly(size + 2))[:-2])
    return args


def _drop_after_watch(at: bytes | None) -> Any:
    """A connection handler that closes the connection at command `at` (None: the first
    command) after a WATCH."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        watching = False
        try:
            while True:
                name = (await _command(reader))[0].upper()
                if watching and (at is None or name == at):
                    break  # the connection dies under the WATCH
                watching = watching or name == b"WATCH"
                writer.write(b":0\r\n" if name == b"EXISTS" else b"+OK\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    return handle


@asynccontextmanager
async def dropping_redis(at: bytes | None = None) -> AsyncIterator[Redis]:
    server = await asyncio.start_server(_drop_after_watch(at), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis = Redis(host="127.0.0.1", port=port, socket_connect_timeout=2)
    try:
        yield redis
    finally:
        await redis.aclose()
        server.close()
        await server.wait_closed()


@pytest.fixture
async def dropping() -> AsyncIterator[Redis]:
    async with dropping_redis() as redis:
        yield redis


async def watch_dropped(redis: Redis) -> rx.WatchError:
    """What redis-py raises when the connection holding a WATCH drops."""
    async with redis.pipeline(transaction=True) as pipe:
        await pipe.watch("k")
        with pytest.raises(rx.WatchError) as caught:
            await pipe.exists("k")
    return caught.value


def a_dropped_watch() -> rx.WatchError:
    """`watch_dropped` outside any event loop (`supervise` runs loops of its own)."""

    async def dropped() -> rx.WatchError:
        async with dropping_redis() as redis:
            return await watch_dropped(redis)

    return asyncio.run(dropped())


async def test_a_watch_cut_by_a_dropped_connection_is_a_lost_connection(dropping: Redis) -> None:
    dropped = await watch_dropped(dropping)
    assert redis_connection_lost(dropped)
    assert not redis_connection_lost(rx.WatchError("Watched variable changed."))


@pytest.mark.parametrize("at", [b"EXISTS", b"MULTI"])
async def test_restoring_live_state_over_a_dropped_connection_says_redis_is_unavailable(
    at: bytes,
) -> None:
    """Dropped at its check or at its transaction: not False ("another restore wrote it
    first"), since nothing was written, and the rebuild that asked must try again."""
    now = datetime.now(UTC)
    summary = BatchSummary(
        batch_id="0" * 32,
        status=BatchStatus.PROCESSING,
        total_files=4,
        processed=1,
        linked=1,
        skipped_no_match=0,
        skipped_already_exists=0,
        failed=0,
        created_at=now,
    )
    async with dropping_redis(at) as redis:
        with pytest.raises(RedisUnavailable):
            await BatchState(redis, ttl_s=60).restore(summary, "acme", {0: "linked"})


class _Worker:
    """What `supervise` needs of arq's Worker: `run`, its loop and its ctx."""

    def __init__(self, fails_with: BaseException | None) -> None:
        self.fails_with = fails_with
        self.loop = asyncio.new_event_loop()  # `shutdown` runs on it after a failure
        self.ctx: dict[str, Any] = {}

    def run(self) -> None:
        if self.fails_with is not None:
            raise self.fails_with


def test_the_worker_reconnects_after_a_watch_cut_by_a_lost_redis() -> None:
    """arq's `start_jobs` WATCHes each job's in-progress key: a Redis lost at that moment
    reaches `supervise` as WatchError, and must start a fresh worker, not end the process."""
    dropped = a_dropped_watch()
    made: list[_Worker] = []

    def make() -> Any:
        made.append(_Worker(dropped if not made else None))
        return made[-1]

    try:
        assert app.supervise(make) == 0
    finally:
        for worker in made:
            worker.loop.close()
    assert len(made) == 2


def test_the_worker_ends_on_a_watch_error_that_is_not_a_lost_connection() -> None:
    worker = _Worker(rx.WatchError("Watched variable changed."))
    try:
        with pytest.raises(rx.WatchError):
            app.supervise(lambda: worker)
    finally:
        worker.loop.close()
