"""The page in headless Chromium against a real API and workers: upload, live progress, report."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import zipfile
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from pdfqueue_dev.processes import wait_until_async
from tests.support.browser import ROOT, DevTools
from tests.support.helpers import ACME, ACME_TOKEN, MakeCorpus, RunWorker

DOCS = ROOT / "docs"
UPDATE_SCREENSHOTS = os.environ.get("PDFQUEUE_UPDATE_SCREENSHOTS") == "1"
"""Save the screenshots over the docs' (docs/*.png); otherwise they go to the test's tmp dir."""


async def until(browser: DevTools, expression: str) -> object:
    """Poll a JS expression until it is truthy; the test's timeout bounds the wait."""
    while not (value := await browser.js(expression)):
        assert await browser.js("document.getElementById('error').textContent") == ""
        await asyncio.sleep(0.05)
    return value


async def screenshot(browser: DevTools, folder: Path, name: str) -> None:
    shot = await browser.call("Page.captureScreenshot", format="png")
    (folder / name).write_bytes(base64.b64decode(shot["data"]))


async def set_file(browser: DevTools, selector: str, path: Path) -> None:
    document = await browser.call("DOM.getDocument")
    node = await browser.call(
        "DOM.querySelector", nodeId=document["root"]["nodeId"], selector=selector
    )
    await browser.call("DOM.setFileInputFiles", nodeId=node["nodeId"], files=[str(path)])


async def open_page(browser: DevTools, url: str, width: int, height: int) -> None:
    """Load the page at `url` in a desktop window of `width` x `height` pixels."""
    await browser.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=height,
        deviceScaleFactor=1,
        mobile=False,
    )
    await browser.call("Page.navigate", url=url)
    await browser.wait_for("Page.loadEventFired")


@pytest.mark.timeout(300)
@pytest.mark.settings(pdfs_per_job=2, worker_max_jobs=1)  # slow enough to be seen running
async def test_page_follows_an_upload_to_its_report(
    served: str,
    browser: DevTools,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    tmp_path: Path,
) -> None:
    shots = DOCS if UPDATE_SCREENSHOTS else tmp_path
    corpus, path = await make_corpus(150, seed=41)
    expected = corpus.counts()
    await open_page(browser, f"{served}/", 1000, 1250)
    await browser.js(f"document.getElementById('token').value = {json.dumps(ACME_TOKEN)}")
    await set_file(browser, "#file", path)
    await browser.js("document.getElementById('go').click()")
    path_now = await until(
        browser, "/^\\/batches\\/[0-9a-f]{32}$/.test(location.pathname) && location.pathname"
    )
    batch_id = str(path_now).rsplit("/", 1)[1]
    await until(browser, f"document.getElementById('batch').textContent === '{batch_id}'")

    worker = asyncio.create_task(run_worker())
    await until(  # live: the bar moves while the batch runs
        browser,
        "document.getElementById('status').textContent === 'PROCESSING'"
        " && document.getElementById('proc').value >= 20",
    )
    await screenshot(browser, shots, "page-running.png")
    await until(browser, "document.getElementById('status').textContent === 'COMPLETED'")
    await worker
    rows = await browser.js(
        "Object.fromEntries([...document.querySelectorAll('#counts tr')]"
        ".map((r) => [r.cells[0].textContent, Number(r.cells[1].textContent)]))"
    )
    assert rows["linked"] == expected["linked"]
    assert rows["skipped: no match"] == expected["skipped_no_match"]
    assert rows["skipped: already linked"] == expected["skipped_already_exists"]
    assert rows["failed"] == expected["failed"]
    assert rows["processed"] == rows["files"] == 150
    assert "in " in await browser.js("document.getElementById('rate').textContent")

    # The table, filtered on the server to the failed files, each with words of advice.
    await browser.js(
        "const f = document.getElementById('fOutcome'); f.value = 'failed';"
        "f.dispatchEvent(new Event('input', {bubbles: true}))"
    )
    await until(
        browser,
        f"document.getElementById('pageInfo').textContent.endsWith('of {expected['failed']}')",
    )
    outcomes = await browser.js(
        "[...document.querySelectorAll('#files tbody tr')].map((r) => r.cells[2].textContent)"
    )
    assert outcomes == ["failed"] * min(expected["failed"], 50)
    advice = await browser.js(
        "[...document.querySelectorAll('#files tbody tr')].map((r) => r.cells[3].textContent)"
    )
    assert all(a and "could not be processed" not in a for a in advice), advice
    await screenshot(browser, shots, "page-done.png")

    # The CSV the page downloads is the API's.
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    await browser.call("Page.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
    await browser.js("document.getElementById('csv').click()")
    saved = downloads / f"{batch_id}.csv"
    await wait_until_async(saved.exists, "the download saved", 60, interval_s=0.02)
    async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
        api_csv = (
            await http.get(f"/v1/batches/{batch_id}/files", params={"format": "csv"})
        ).content
    await wait_until_async(
        lambda: saved.read_bytes() == api_csv, "the saved report", 60, interval_s=0.02
    )

    # A reload resumes the same batch; the list has it, with its file name.
    await browser.call("Page.reload")
    await browser.wait_for("Page.loadEventFired")
    await until(browser, "document.getElementById('status').textContent === 'COMPLETED'")
    assert await browser.js("document.getElementById('batch').textContent") == batch_id
    await browser.js("document.getElementById('back').click()")
    listed = await until(
        browser,
        "[...document.querySelectorAll('#batches tbody tr')].map((r) => r.cells[0].textContent)",
    )
    assert listed[0] == path.name
    assert await browser.js("location.pathname") == "/"

    # On a phone: one column, nothing wider than the screen.
    await browser.call(
        "Emulation.setDeviceMetricsOverride",
        width=390,
        height=844,
        deviceScaleFactor=1,
        mobile=True,
    )
    await browser.js(
        f"history.pushState(null, '', '/batches/{batch_id}');"
        "dispatchEvent(new PopStateEvent('popstate'))"
    )
    await until(browser, "document.getElementById('status').textContent === 'COMPLETED'")
    await until(browser, "document.querySelectorAll('#files tbody tr').length > 0")
    assert await browser.js("document.documentElement.scrollWidth") <= 390
    await screenshot(browser, shots, "page-phone.png")

    assert await browser.js("window.__violations") == []
    errors = [line for line in browser.console if "error" in line.lower()]
    assert [e for e in errors if not e.endswith("/favicon.ico")] == []
    assert re.fullmatch(r"[0-9a-f]{32}", batch_id)


@pytest.mark.timeout(180)
@pytest.mark.settings(job_timeout_s=1)  # its last jobs settle within seconds, not a minute
async def test_page_erases_a_batch_behind_its_own_confirmation(
    served: str,
    served_app: FastAPI,
    browser: DevTools,
    make_corpus: MakeCorpus,
) -> None:
    """The batch view's Erase asks first (a step of the page, the safe answer focused, Escape
    backs out), closes the batch's event stream, shows 202 as erasing and the end as erased.
    An earlier attempt left the stream open: the server never ended it, and the API could not
    shut down."""
    _, path = await make_corpus(6, seed=43)
    async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
        created = await http.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        batch_id = created.json()["batch_id"]
        await browser.call("Page.navigate", url=f"{served}/")
        await browser.wait_for("Page.loadEventFired")
        await browser.js(f"sessionStorage.setItem('pdfqueue-token', {json.dumps(ACME_TOKEN)})")
        await browser.js(
            f"history.pushState(null, '', '/batches/{batch_id}');"
            "dispatchEvent(new PopStateEvent('popstate'))"
        )
        await until(browser, "document.getElementById('status').textContent === 'PENDING'")
        feed = served_app.state.runtime.feed
        await wait_until_async(lambda: batch_id in feed.watchers or None, "the page's stream")

        await browser.js("document.getElementById('erase').click()")
        assert await browser.js("document.getElementById('eraseConfirm').hidden") is False
        assert await browser.js("document.activeElement.id") == "eraseNo"
        assert await browser.js("document.getElementById('erase').ariaExpanded") == "true"
        await browser.call(
            "Input.dispatchKeyEvent",
            type="keyDown",
            key="Escape",
            code="Escape",
            windowsVirtualKeyCode=27,
        )
        assert await browser.js("document.getElementById('eraseConfirm').hidden") is True
        assert await browser.js("document.activeElement.id") == "erase"
        assert (await http.get(f"/v1/batches/{batch_id}")).status_code == 200  # nothing done

        await browser.js("document.getElementById('erase').click()")
        await browser.js("document.getElementById('eraseYes').click()")
        await until(browser, "document.getElementById('status').textContent === 'ERASING'")
        await wait_until_async(lambda: batch_id not in feed.watchers or None, "stream closed")
        await until(  # the 202: hidden and cancelled, its last jobs given time
            browser, "document.getElementById('rate').textContent.includes('about')"
        )
        assert (await http.get(f"/v1/batches/{batch_id}")).status_code == 404
        await until(browser, "document.getElementById('status').textContent === 'ERASED'")
        assert await browser.js("document.querySelectorAll('#files tbody tr').length") == 0
        assert await browser.js("document.getElementById('erase').hidden") is True
        gone = await http.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
        assert gone.status_code == 404  # the page finished it: nothing left to erase

    assert await browser.js("window.__violations") == []
    errors = [line for line in browser.console if "error" in line.lower()]
    assert [e for e in errors if not e.endswith("/favicon.ico")] == []


async def test_page_without_a_token_says_what_a_token_is_and_where_one_comes_from(
    served: str, browser: DevTools, tmp_path: Path
) -> None:
    await open_page(browser, f"{served}/", 1000, 700)
    await until(browser, "!document.getElementById('noToken').hidden")
    words = await browser.js("document.getElementById('noToken').innerText")
    assert "API token" in words
    assert "PDFQUEUE_API_TOKENS" in words
    assert "make demo" in words
    shown = "(id) => document.getElementById(id).getClientRects().length > 0"
    assert await browser.js(f"({shown})('batches')") is False  # no empty table
    assert await browser.js(f"({shown})('form')") is False  # nor an upload bound to fail
    assert await browser.js("document.activeElement.id") == "token"
    await screenshot(browser, tmp_path, "page-no-token.png")

    # The token entered, the page is the usual one.
    await browser.js(f"document.getElementById('token').value = {json.dumps(ACME_TOKEN)}")
    await browser.js("document.querySelector('#tokenForm button').click()")
    await until(browser, f"({shown})('batches') && ({shown})('form')")
    assert await browser.js("document.getElementById('noToken').hidden") is True
    await until(  # the tenant's list, whatever it holds
        browser,
        "!document.getElementById('listEmpty').hidden"
        " || document.querySelectorAll('#batches tbody tr').length > 0",
    )

    assert await browser.js("window.__violations") == []
    errors = [line for line in browser.console if "error" in line.lower()]
    assert [e for e in errors if not e.endswith("/favicon.ico")] == []


async def test_page_shows_why_a_zip_without_pdfs_failed_and_lists_its_files(
    served: str, browser: DevTools, run_worker: RunWorker, tmp_path: Path
) -> None:
    path = tmp_path / "no-pdf.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "hello")
        zf.writestr("a.docx", b"not a pdf")
    async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
        created = await http.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
    batch_id = created.json()["batch_id"]
    await run_worker()

    await open_page(browser, f"{served}/", 1000, 900)
    await browser.js(f"sessionStorage.setItem('pdfqueue-token', {json.dumps(ACME_TOKEN)})")
    await browser.js(
        f"history.pushState(null, '', '/batches/{batch_id}');"
        "dispatchEvent(new PopStateEvent('popstate'))"
    )
    status = await until(
        browser,
        "document.getElementById('status').textContent.startsWith('FAILED')"
        " && document.getElementById('status').textContent",
    )
    assert "the ZIP holds 2 files and none is a PDF" in str(status)
    assert await browser.js("document.getElementById('why').hidden") is False
    why = await browser.js("document.getElementById('why').textContent")
    assert "no file in it has a name ending in .pdf" in why
    assert "upload it again" in why
    await until(browser, "document.querySelectorAll('#files tbody tr').length === 2")
    names = await browser.js(
        "[...document.querySelectorAll('#files tbody tr')].map((r) => r.cells[1].textContent)"
    )
    assert sorted(names) == ["a.docx", "readme.txt"]
    await screenshot(browser, tmp_path, "page-no-pdf.png")

    assert await browser.js("window.__violations") == []
    errors = [line for line in browser.console if "error" in line.lower()]
    assert [e for e in errors if not e.endswith("/favicon.ico")] == []
