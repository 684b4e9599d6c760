"""A real API on a loopback port and headless Chromium driven over the DevTools protocol."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import websockets
from fastapi import FastAPI

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import free_port
from tests.support.tools import installed

ROOT = Path(__file__).parents[2]
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""
"""Runs before the page's own script: every CSP violation the page causes is kept."""


def chromium() -> str:
    return installed("chromium", "chromium")


class DevTools:
    """The Chrome DevTools Protocol over one WebSocket, attached to one page."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.session: str | None = None
        self.console: list[str] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self.ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        await self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(await self.ws.recv())
            self._note(reply)
            if reply.get("id") == message_id:
                assert "error" not in reply, reply
                result: dict[str, Any] = reply["result"]
                return result

    async def wait_for(self, event: str) -> None:
        while True:
            reply = json.loads(await self.ws.recv())
            self._note(reply)
            if reply.get("method") == event:
                return

    async def js(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def _note(self, reply: dict[str, Any]) -> None:
        """Console errors and browser log entries (CSP reports land there too)."""
        if reply.get("method") == "Log.entryAdded":
            entry = reply["params"]["entry"]
            self.console.append(f"{entry['level']}: {entry['text']} {entry.get('url', '')}")
        elif reply.get("method") == "Runtime.consoleAPICalled":
            args = reply["params"]["args"]
            self.console.append(f"console.{reply['params']['type']}: {args}")


@pytest.fixture
async def served_app(settings: Settings) -> FastAPI:
    from pdfqueue_api.app import create_app

    return create_app(settings)


@pytest.fixture
async def served(served_app: FastAPI) -> AsyncIterator[str]:
    """The API on a real loopback port (uvicorn in this event loop), as a browser needs."""
    port = free_port()
    config = uvicorn.Config(
        served_app, host="127.0.0.1", port=port, log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the API did not start"
        await asyncio.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[DevTools]:
    process = await asyncio.create_subprocess_exec(
        chromium(),
        "--headless",
        "--no-sandbox",  # runs as root here
        "--disable-gpu",
        "--disable-background-networking",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--remote-debugging-port=0",
        "about:blank",
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    assert process.stderr is not None
    url = ""
    while not url:
        line = (await asyncio.wait_for(process.stderr.readline(), 60)).decode()
        assert line, "chromium exited before listening"
        if found := re.search(r"DevTools listening on (ws://\S+)", line):
            url = found.group(1)
    drain = asyncio.create_task(process.stderr.read())  # keep its pipe from filling up
    try:
        async with websockets.connect(url, max_size=None) as ws:
            tools = DevTools(ws)
            target = await tools.call("Target.createTarget", url="about:blank")
            attached = await tools.call(
                "Target.attachToTarget", targetId=target["targetId"], flatten=True
            )
            tools.session = attached["sessionId"]
            for domain in ("Page", "Runtime", "Log", "DOM"):
                await tools.call(f"{domain}.enable")
            await tools.call("Page.addScriptToEvaluateOnNewDocument", source=RECORD_VIOLATIONS)
            yield tools
    finally:
        process.terminate()
        await process.wait()
        await drain
