"""The upload page in real headless Chromium, under its CSP: it loads, uploads, shows progress."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import websockets
from helpers import ACME_TOKEN, MakeCorpus, RunWorker

from pdfqueue.settings import Settings

ROOT = Path(__file__).parents[2]
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""
"""Runs before the page's own script: every CSP violation the page causes is kept."""


def chromium() -> str:
    if not shutil.which("chromium"):
        subprocess.run(["bash", str(ROOT / "tools/services.sh"), "chromium"], check=True)
    found = shutil.which("chromium")
    assert found, "chromium not installed (tools/services.sh chromium)"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
async def served(settings: Settings) -> AsyncIterator[str]:
    """The API on a real loopback port (uvicorn in this event loop), as a browser needs."""
    from pdfqueue_api.app import create_app

    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_config=None, access_log=False
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


@pytest.mark.timeout(180)
async def test_page_uploads_under_its_csp(
    served: str, browser: DevTools, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    corpus, path = await make_corpus(6, seed=31)
    await browser.call("Page.navigate", url=f"{served}/")
    await browser.wait_for("Page.loadEventFired")
    # The stylesheet applied (the button's colour) and the script ran (its handler is set).
    color = await browser.js("getComputedStyle(document.querySelector('button')).backgroundColor")
    assert color == "rgb(37, 87, 214)"

    await browser.js(f"document.getElementById('token').value = {json.dumps(ACME_TOKEN)}")
    document = await browser.call("DOM.getDocument")
    node = await browser.call(
        "DOM.querySelector", nodeId=document["root"]["nodeId"], selector="#file"
    )
    await browser.call("DOM.setFileInputFiles", nodeId=node["nodeId"], files=[str(path)])
    await browser.js("document.getElementById('go').click()")
    batch_id = ""
    while not re.fullmatch(r"[0-9a-f]{32}", batch_id):  # the upload answered 202
        assert not await browser.js("document.getElementById('error').textContent")
        batch_id = await browser.js("document.getElementById('batch').textContent")
        await asyncio.sleep(0.1)

    await run_worker()
    status = ""
    while not status.startswith("COMPLETED"):  # the page polls every 0.5 s
        status = await browser.js("document.getElementById('status').textContent")
        await asyncio.sleep(0.1)
    rows = await browser.js(
        "[...document.querySelectorAll('#counts tr')].map((r) => r.innerText.split('\\t'))"
    )
    assert ["linked", str(corpus.counts()["linked"])] in rows
    assert await browser.js("document.getElementById('report').hidden") is False

    assert await browser.js("window.__violations") == []
    errors = [line for line in browser.console if "error" in line.lower()]
    assert [e for e in errors if not e.endswith("/favicon.ico")] == []  # the page has no icon

    # The recorder works: an injected inline script is refused and reported.
    await browser.js(
        "const s = document.createElement('script'); s.textContent = 'window.__ran = 1';"
        "document.body.append(s);"
    )
    assert await browser.js("window.__ran") is None
    violations: list[str] = []
    while not violations:  # reported asynchronously
        await asyncio.sleep(0.05)
        violations = await browser.js("window.__violations")
    assert violations == ["script-src-elem inline"]
