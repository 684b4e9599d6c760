"""A process started beside its database (new pods, side by side) waits for it: no crash loop."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit, urlunsplit

import pytest

from pdfqueue.domain.errors import DatabaseUnavailable
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime import connections as runtime
from pdfqueue.runtime.connections import Stores, worker_role
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
