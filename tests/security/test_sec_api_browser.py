"""The upload page in real headless Chromium, under its CSP: it loads, uploads, shows progress."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.support.browser import DevTools
from tests.support.helpers import ACME_TOKEN, MakeCorpus, RunWorker


@pytest.mark.timeout(180)
async def test_page_uploads_under_its_csp(
    served: str, browser: DevTools, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    corpus, path = await make_corpus(6, seed=31)
    await browser.call("Page.navigate", url=f"{served}/")
    await browser.wait_for("Page.loadEventFired")
    # The stylesheet applied (the button's colour) and the script ran (its handler is set).
    color = await browser.js("getComputedStyle(document.getElementById('go')).backgroundColor")
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
    assert await browser.js("document.getElementById('csv').hidden") is False

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
