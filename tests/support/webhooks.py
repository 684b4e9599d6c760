"""Webhook receivers on loopback ports: one that answers, one that never does, one that
trickles; and what the tests read back about deliveries."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import uvicorn

SECRET = "whsec-test-0123456789abcdef0123456789abcdef"
"""The webhook signing secret the tests give their tenants."""


@dataclass
class Receiver:
    """An HTTP server on a loopback port that records every request it gets."""

    port: int
    answer: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    got: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/pdf"

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.got.append((scope["path"], headers, body))
        extra = [(k.encode(), v.encode()) for k, v in self.headers.items()]
        await send({"type": "http.response.start", "status": self.answer, "headers": extra})
        await send({"type": "http.response.body", "body": b"ok"})

    async def start(self) -> None:
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_config=None,
            access_log=False,
            interface="asgi3",
        )
        self.server = uvicorn.Server(config)
        self.task = asyncio.create_task(self.server.serve())
        while not self.server.started:
            assert not self.task.done(), "the receiver did not start"
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self.server is not None and self.task is not None:
            self.server.should_exit = True
            await self.task


@dataclass
class Stalling:
    """A TCP server on a loopback port that accepts every connection and then, as `mode` says:
    `silent` never answers; `headers` answers a status line and then one header byte a
    second for ever; `body` answers its headers at once and then one body byte a second.

    `open` is the connections held right now, `peak` the most held at once, `accepted` all."""

    mode: str = "silent"
    open: int = 0
    peak: int = 0
    accepted: int = 0
    server: asyncio.Server | None = None
    port: int = 0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/pdf"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            await reader.readuntil(b"\r\n\r\n")  # the request's headers; its body may follow
            if self.mode == "headers":
                writer.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            elif self.mode == "body":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
            while not self.stopping.is_set():
                if self.mode != "silent":
                    writer.write(b"a")
                    await writer.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), 1)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the caller gave up: what we are here to see
        finally:
            self.open -= 1
            writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.stopping.set()
            self.server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 5)


async def deliveries(db: asyncpg.Connection, batch_id: str) -> list[dict[str, Any]]:
    """The delivery records of a batch, in the order they were written."""
    rows = await db.fetch(
        "SELECT round, attempt, url, status_code, error FROM pdfqueue_webhook_deliveries"
        " WHERE batch_id = $1 ORDER BY id",
        batch_id,
    )
    return [dict(r) for r in rows]


async def upload_with(
    api: httpx.AsyncClient, path: Path, callback: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    """Upload the ZIP at `path` naming `callback` as its callback_url."""
    return await api.post(
        "/v1/batches",
        params={"callback_url": callback},
        content=path.read_bytes(),
        headers={"Content-Type": "application/zip", **(headers or {})},
    )
