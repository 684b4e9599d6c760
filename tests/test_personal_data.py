"""Names and addresses stay in the report: never in logs, traces, metrics or the audit trail.

A batch whose member names, uploaded file name and addresses are distinctive runs through the
real API and a real worker, is read, erased by its tenant; a second one runs, loses a person to
an administrator's erasure and is purged. Meanwhile every log record (DEBUG, through the JSON
formatter the processes use and as caplog keeps them), every span, both metrics expositions
and the audit records are kept, and none may carry a name or an address.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY, generate_latest
from redis.asyncio import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import Eraser
from pdfqueue.observability.logging import log_handler
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.postgres.retention import RetentionStore
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import Corpus, Mix, build_corpus, seed_users, write_zip
from tests.support.helpers import RunWorker
from tests.support.spans import capture_spans

NAME = "Zyxwvut Qponmlk"
"""In every member's name: a person's name nothing else in the system could produce."""
DOMAIN = "qponmlk-zyxwvut.example"
UPLOAD_NAME = f"{NAME} candidates.zip"
MIX = Mix(known=0.6, no_email=0.1, unknown_email=0.1, already_linked=0.1, corrupt=0.1)


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """Spans of this process, through the services' own tracing setup."""
    return capture_spans()


@pytest.fixture
def json_logs(caplog: pytest.LogCaptureFixture) -> Iterator[io.StringIO]:
    """Every log record of the test at DEBUG, as the services write them (JSON)."""
    buffer = io.StringIO()
    handler = log_handler(json_lines=True, stream=buffer)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    caplog.set_level(logging.DEBUG)
    yield buffer
    root.removeHandler(handler)


@pytest.fixture
async def eraser(settings: Settings) -> AsyncIterator[Eraser]:
    pool = await connect(settings.database_url, max_size=4)
    storage = Storage.from_settings(settings, threads=4)
    client = Redis.from_url(settings.redis_url)
    yield Eraser(
        RetentionStore.of(pool, settings),
        lifecycle_over(pool, client, settings),
        storage,
        settings,
    )
    await client.aclose()
    await storage.aclose()
    await pool.close()


def distinctive(corpus: Corpus, offset: int) -> Corpus:
    """The corpus with a distinctive name in every member and a distinctive address for
    everyone (the users' and the unknown ones alike)."""
    addresses: dict[str, str] = {}

    def address(old: str) -> str:
        return addresses.setdefault(old, f"qponmlk.{len(addresses)}.{offset}@{DOMAIN}")

    users = [
        dataclasses.replace(u, id=u.id + offset, email=address(u.email), name=NAME)
        for u in corpus.users
    ]
    files = [
        dataclasses.replace(
            f,
            name=f"{f.name[: len('resumes/00001-')]}{NAME} CV.pdf",  # the corpus' index prefix
            email=address(f.email) if f.email else None,
        )
        for f in corpus.files
    ]
    return Corpus(users=users, files=files)


def personal(corpus: Corpus) -> set[str]:
    """What must not leak, lower case: the names and every address."""
    found = {NAME.lower(), "qponmlk", "zyxwvut", UPLOAD_NAME.lower()}
    found |= {f.name.lower() for f in corpus.files}
    found |= {u.email.lower() for u in corpus.users}
    found |= {f.email.lower() for f in corpus.files if f.email}
    return found


def ours(message: str) -> bool:
    """A request line of the test's own client (httpx logs each one at INFO)."""
    return message.startswith("HTTP Request: ") and "http://pdfqueue.test/" in message


def leaks(text: str, secrets_: set[str]) -> list[str]:
    low = text.lower()
    return sorted(s for s in secrets_ if s in low)


async def test_names_and_addresses_appear_only_in_the_report(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    eraser: Eraser,
    exporter: InMemorySpanExporter,
    json_logs: io.StringIO,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    started = datetime.now(UTC)
    exporter.clear()
    offset = secrets.randbelow(10**9) * 1000
    corpus = distinctive(build_corpus(20, seed=27, mix=MIX, extra_users=2), offset)
    await seed_users(db, corpus.users, table=settings.users_table)
    first = dataclasses.replace(corpus, files=corpus.files[:10])
    second = dataclasses.replace(corpus, files=corpus.files[10:])
    must_not = personal(corpus)

    async def run(part: Corpus, name: str) -> str:
        body = write_zip(part, tmp_path / name, junk=False).read_bytes()
        response = await api.post(
            "/v1/batches", files={"file": (UPLOAD_NAME, body, "application/zip")}
        )
        assert response.status_code == 202, response.text
        batch_id: str = response.json()["batch_id"]
        await run_worker()
        summary = (await api.get(f"/v1/batches/{batch_id}")).json()
        assert summary["status"] == "COMPLETED", summary
        return batch_id

    # A batch run, read (the report is where the names belong) and erased by its tenant.
    one = await run(first, "one.zip")
    report = (await api.get(f"/v1/batches/{one}/files")).json()
    assert {r["name"] for r in report} == {f.name for f in first.files}  # the report shows them
    csv = await api.get(f"/v1/batches/{one}/files", headers={"Accept": "text/csv"})
    assert NAME in csv.text
    page = await api.get(f"/v1/batches/{one}/files/page", params={"search": "Qponmlk"})
    assert page.status_code == 200, page.text
    erased = await api.delete(f"/v1/batches/{one}", params={"erase": "true"})
    assert erased.status_code == 200, erased.text
    assert (await api.get(f"/v1/batches/{one}")).status_code == 404

    # Another: a person erased by an administrator, then the batch purged.
    two = await run(second, "two.zip")
    linked = [f for f in second.files if f.expect.value == "linked" and f.email]
    assert linked
    removed = await eraser.erase_person(linked[0].email or "")
    assert removed.files == 1
    await db.execute(
        "UPDATE pdfqueue_batches SET completed_at = now() - interval '2 days' WHERE id = $1", two
    )
    purged = await eraser.purge(older_than_s=86400, tenant="acme")
    assert purged.removed.batches >= 1
    assert (await api.get(f"/v1/batches/{two}")).status_code == 404

    # Where personal data must never be. The test's own HTTP client logs its requests (the
    # report's search term among them): that is this test talking, not a pdfqueue process
    # (the API runs uvicorn without an access log).
    assert json_logs.getvalue(), "no log line was captured"
    lines = "\n".join(
        line for line in json_logs.getvalue().splitlines() if not ours(json.loads(line)["msg"])
    )
    assert not leaks(lines, must_not), [
        line for line in lines.splitlines() if leaks(line, must_not)
    ][:5]
    kept = [r for r in caplog.records if not ours(r.getMessage())]
    records = "\n".join(
        f"{r.name} {r.getMessage()} {json.dumps(vars(r), default=str)}" for r in kept
    )
    assert any(r.levelno == logging.DEBUG for r in caplog.records), "DEBUG was not captured"
    assert not leaks(records, must_not), [
        f"{r.name}: {r.getMessage()}" for r in kept if leaks(str(vars(r)), must_not)
    ][:5]

    spans = exporter.get_finished_spans()
    queries = [str((s.attributes or {}).get("url.query", "")) for s in spans]
    assert [q for q in queries if q.startswith("search=")] == ["search=REDACTED"]
    for span in spans:
        text = json.dumps(
            {
                "name": span.name,
                "attributes": dict(span.attributes or {}),
                "events": [(e.name, dict(e.attributes or {})) for e in span.events],
                "status": span.status.description,
                "resource": dict(span.resource.attributes),
            },
            default=str,
        )
        assert not leaks(text, must_not), text

    exposition = (await api.get("/metrics")).text
    assert "pdfqueue_data_removed_total" in exposition
    assert not leaks(exposition, must_not)
    assert not leaks(generate_latest(REGISTRY).decode(), must_not)  # the worker's, in-process

    audit = await db.fetch("SELECT * FROM pdfqueue_audit WHERE at >= $1", started)
    assert {r["action"] for r in audit} >= {"erase_batch", "erase_person", "purge"}
    assert not leaks(json.dumps([dict(r) for r in audit], default=str), must_not)
    files_left = await db.fetch(
        "SELECT name FROM pdfqueue_files WHERE batch_id = ANY($1::text[])", [one, two]
    )
    assert not files_left
