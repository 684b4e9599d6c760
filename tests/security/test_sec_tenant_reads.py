"""Hostile tenants, reads (issue 36, part B): one tenant's heavy reads cost that tenant only.

Tenant A downloads its reports many times at once, some readers stalled and some fast, while
tenant B lists and polls; against the real `pdfqueue api` process (true concurrency, memory
from /proc) and, for which route holds which slot, the app served in this event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import wait_until_async
from tests.support.real_api import RealApi

A_TOKEN = f"reads-a-{uuid.uuid4().hex}"
B_TOKEN = f"reads-b-{uuid.uuid4().hex}"
A = {"Authorization": f"Bearer {A_TOKEN}"}
B = {"Authorization": f"Bearer {B_TOKEN}"}
REPORT_ROWS = 5000
STALLED_ROWS = 100_000
"""A report far larger than the socket buffers between the API and a reader that stopped
reading (a few MiB on loopback): its download stays in progress until the reader goes."""


@pytest.fixture
def tenants() -> tuple[str, str]:
    return f"reads-a-{uuid.uuid4().hex[:10]}", f"reads-b-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(settings: Settings, tenants: tuple[str, str]) -> Settings:
    """Tenants A and B of this test only, the read quotas at their defaults."""
    tokens = {A_TOKEN: tenants[0], B_TOKEN: tenants[1]}
    return settings.model_copy(update={"api_tokens": tokens})


@pytest.fixture
async def reports(
    db: asyncpg.Connection, tenants: tuple[str, str]
) -> AsyncIterator[dict[str, str]]:
    """Completed batches with their file rows: A's report, A's huge one, and B's."""
    made = {"a": (tenants[0], REPORT_ROWS), "a_huge": (tenants[0], STALLED_ROWS)}
    made["b"] = (tenants[1], 20)
    ids = {name: uuid.uuid4().hex for name in made}
    for name, (tenant, rows) in made.items():
        await db.execute(
            "INSERT INTO pdfqueue_batches (id, tenant, source_key, status, total_files,"
            " created_at, completed_at) VALUES ($1, $2, 'k', 'COMPLETED', $3, now(), now())",
            ids[name],
            tenant,
            rows,
        )
        await db.execute(
            "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome, reason)"
            " SELECT $1, i, 'CVs 2024/Zoë Müller ' || lpad(i::text, 6, '0') || ' CV.pdf',"
            " CASE WHEN i % 10 = 0 THEN 'skipped_no_match' ELSE 'linked' END,"
            " CASE WHEN i % 10 = 0 THEN 'no_user' END FROM generate_series(0, $2 - 1) i",
            ids[name],
            rows,
        )
    yield ids
    await db.execute("DELETE FROM pdfqueue_batches WHERE id = ANY($1)", list(ids.values()))


def report_url(batch_id: str) -> str:
    return f"/v1/batches/{batch_id}/files?format=csv"


@contextlib.contextmanager
def stalled_download(api: RealApi, batch_id: str) -> Iterator[bytes]:
    """A's download that reads the answer's head and then nothing: its response stays in
    progress while the block runs. Yields what was read (the head)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", api.port))
    try:
        request = f"GET {report_url(batch_id)} HTTP/1.1\r\nHost: pdfqueue.test\r\n"
        sock.sendall(f"{request}Authorization: Bearer {A_TOKEN}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1024)
        yield head
    finally:
        sock.close()


async def reads_of_b(http: httpx.AsyncClient, batch_id: str, rounds: int) -> list[int]:
    """B's list and status reads, one after the other, then its own report: their statuses."""
    statuses = []
    for _ in range(rounds):
        statuses.append((await http.get("/v1/batches", headers=B)).status_code)
        statuses.append((await http.get(f"/v1/batches/{batch_id}", headers=B)).status_code)
    statuses.append((await http.get(report_url(batch_id), headers=B)).status_code)
    return statuses


def api_client(api: RealApi) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    return httpx.AsyncClient(base_url=api.url, timeout=60, limits=limits)


@pytest.mark.timeout(180)
async def test_a_tenant_past_its_report_downloads_gets_429_and_another_tenant_reads_on(
    settings: Settings, reports: dict[str, str], tmp_path: Path
) -> None:
    api = RealApi(settings, tmp_path)
    try:
        with (
            stalled_download(api, reports["a_huge"]) as first,
            stalled_download(api, reports["a_huge"]) as second,
        ):
            # A's two report slots are held by readers that stopped reading
            assert first.startswith(b"HTTP/1.1 200"), first[:200]
            assert second.startswith(b"HTTP/1.1 200"), second[:200]
            async with api_client(api) as http:
                downloads = [http.get(report_url(reports["a"]), headers=A) for _ in range(28)]
                theirs = asyncio.gather(*downloads)
                b_statuses = await reads_of_b(http, reports["b"], rounds=20)
                a_answers = await theirs
        assert b_statuses == [200] * 41  # B never waits for A's share, never a 503
        assert [r.status_code for r in a_answers] == [429] * 28
        for refused in a_answers:
            assert refused.headers["retry-after"] == "5"
            assert refused.json() == {
                "detail": "quota concurrent_reports (2) is used up; retry in 5 s"
            }
        # the stalled readers went away: their slots are A's again
        async with api_client(api) as http:
            again = await http.get(report_url(reports["a"]), headers=A)
        assert again.status_code == 200
        assert again.text.count("\n") == REPORT_ROWS + 1
    finally:
        api.child.stop(10)


class PeakRss:
    """The API process's highest VmRSS while the block runs, sampled from /proc."""

    def __init__(self, api: RealApi) -> None:
        self.api = api
        self.peak_kib = api.rss_kib()
        self.done = threading.Event()

    def __enter__(self) -> PeakRss:
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)

    def _sample(self) -> None:
        while not self.done.wait(0.01):
            self.peak_kib = max(self.peak_kib, self.api.rss_kib())


RSS_BOUND_KIB = 60 * 1024
"""30 downloads of a 5,000-row report at once took the API 183 MB before each download
streamed a page of rows at a time."""


@pytest.mark.timeout(180)
async def test_thirty_parallel_report_downloads_keep_the_api_small_and_another_tenant_answered(
    settings: Settings, reports: dict[str, str], tmp_path: Path
) -> None:
    wide = settings.model_copy(update={"quota_concurrent_reports": 30})
    api = RealApi(wide, tmp_path)
    try:
        async with api_client(api) as http:
            warm = await http.get(report_url(reports["a"]), headers=A)  # code paths loaded
            assert warm.status_code == 200
            baseline_kib = api.rss_kib()
            with PeakRss(api) as rss:
                downloads = [http.get(report_url(reports["a"]), headers=A) for _ in range(30)]
                theirs = asyncio.gather(*downloads)
                b_statuses = await reads_of_b(http, reports["b"], rounds=10)
                a_answers = await theirs
        grown_kib = rss.peak_kib - baseline_kib
        print(f"API RSS: baseline {baseline_kib} KiB, peak +{grown_kib} KiB over 30 downloads")
        assert [r.status_code for r in a_answers] == [200] * 30
        assert all(r.text == warm.text for r in a_answers)
        assert b_statuses == [200] * 21
        assert grown_kib < RSS_BOUND_KIB, grown_kib
    finally:
        api.child.stop(10)


# --- which route holds which slot: the app in this event loop, its slots at hand ----------


async def all_held(slots: Any, tenant: str, stack: contextlib.AsyncExitStack) -> None:
    for _ in range(slots.limit):
        await stack.enter_async_context(slots.held(tenant))


async def test_reads_past_a_tenants_share_wait_then_get_429_and_others_are_answered(
    served: str, served_app: FastAPI, reports: dict[str, str], tenants: tuple[str, str]
) -> None:
    service = served_app.state.runtime.service
    a_batch, b_batch = reports["a"], reports["b"]
    reads = [
        "/v1/batches",
        f"/v1/batches/{a_batch}",
        f"/v1/batches/{a_batch}/files/page",
        f"/v1/batches/{a_batch}/events",
    ]
    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        async with contextlib.AsyncExitStack() as stack:
            await all_held(service.reads, tenants[0], stack)  # A's reads all in flight
            refused = await asyncio.gather(*(http.get(path, headers=A) for path in reads))
            for path, answer in zip(reads, refused, strict=True):
                assert answer.status_code == 429, (path, answer.text)
                assert answer.headers["retry-after"] == "1", path
                assert "concurrent_reads (4)" in answer.json()["detail"]
            for path in [*(p.replace(a_batch, b_batch) for p in reads), report_url(b_batch)]:
                assert (await http.get(path, headers=B)).status_code == 200, path
            # an admitted report and a status read wait for the first slots freed
            report = asyncio.create_task(http.get(report_url(a_batch), headers=A))
            share = service.reads.shares[tenants[0]]
            await wait_until_async(
                lambda: len(share.waiters) == 1, "a report waiting", 5, interval_s=0.01
            )
            assert service.reports.holding(tenants[0]) == 1
            status = asyncio.create_task(http.get(f"/v1/batches/{a_batch}", headers=A))
            await wait_until_async(
                lambda: len(share.waiters) == 2, "a read waiting", 5, interval_s=0.01
            )
            await stack.aclose()
            assert (await status).status_code == 200
            assert (await report).status_code == 200
        # every slot is free again: the tenant is forgotten
        assert service.reads.shares == {}
        assert service.reports.shares == {}
        async with contextlib.AsyncExitStack() as stack:
            await all_held(service.reports, tenants[0], stack)
            refused_report = await http.get(report_url(a_batch), headers=A)
            assert refused_report.status_code == 429
            assert refused_report.headers["retry-after"] == "5"
            assert (await http.get(f"/v1/batches/{a_batch}", headers=A)).status_code == 200
            assert (await http.get(report_url(b_batch), headers=B)).status_code == 200
        assert service.reports.shares == {}
