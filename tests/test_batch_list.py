"""The batch list and the paged report: tenant-scoped, paged on the server, names sanitised."""

from __future__ import annotations

import io
import uuid
import zipfile
from pathlib import Path

import asyncpg
import httpx
import pytest

from pdfqueue.domain.models import FileQuery
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.files import _FILE_ORDER, _file_filters
from tests.support.helpers import GLOBEX, MakeCorpus, RunWorker

SOLO_TOKEN = "solo-test-token-00112233445566778899aabbccdd"
SOLO = {"Authorization": f"Bearer {SOLO_TOKEN}"}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """A tenant of its own, so the list holds this test's batches only."""
    tenant = f"solo-{uuid.uuid4().hex[:12]}"
    return settings.model_copy(update={"api_tokens": {**settings.api_tokens, SOLO_TOKEN: tenant}})


def tiny_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.pdf", b"%PDF-1.4\n%%EOF\n")
    return buffer.getvalue()


async def upload_as(api: httpx.AsyncClient, how: str, name: str) -> str:
    body = tiny_zip()
    if how == "multipart":
        response = await api.post(
            "/v1/batches", files={"file": (name, body, "application/zip")}, headers=SOLO
        )
    elif how == "query":
        response = await api.post(
            "/v1/batches",
            params={"name": name},
            content=body,
            headers={**SOLO, "Content-Type": "application/zip"},
        )
    else:
        response = await api.post(
            "/v1/batches",
            content=body,
            headers={**SOLO, "Content-Type": "application/zip", "X-Filename": name},
        )
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    return batch_id


async def test_list_is_newest_first_paged_and_names_are_sanitised(api: httpx.AsyncClient) -> None:
    first = await upload_as(api, "multipart", "C:\\Users\\ann\\résumés\u202e 2024.zip")
    second = await upload_as(api, "query", "../../etc/passwd\x00\n" + "x" * 500)
    third = await upload_as(api, "header", "plain.zip")

    page = (await api.get("/v1/batches", params={"limit": 2}, headers=SOLO)).json()
    assert [b["batch_id"] for b in page["batches"]] == [third, second]
    assert page["batches"][0]["file_name"] == "plain.zip"
    assert page["batches"][1]["file_name"] == ("passwd" + "x" * 500)[:200]  # no NUL, no newline
    assert page["batches"][0]["status"] == "PENDING"
    assert page["batches"][0]["duration_s"] is None
    assert page["next_cursor"]

    rest = await api.get(
        "/v1/batches", params={"limit": 2, "cursor": page["next_cursor"]}, headers=SOLO
    )
    assert rest.status_code == 200
    assert [b["batch_id"] for b in rest.json()["batches"]] == [first]
    assert rest.json()["batches"][0]["file_name"] == "résumés 2024.zip"  # no bidi override
    assert rest.json()["next_cursor"] is None

    # The batch's own status carries the name too.
    assert (await api.get(f"/v1/batches/{third}", headers=SOLO)).json()["file_name"] == "plain.zip"

    # Another tenant sees none of them.
    theirs = (await api.get("/v1/batches", params={"limit": 100}, headers=GLOBEX)).json()
    assert {first, second, third}.isdisjoint(b["batch_id"] for b in theirs["batches"])


@pytest.mark.parametrize(
    "cursor", ["garbage", "WyJ4IiwgImEiXQ", "WzEsIDJd", "eyJhIjogMX0", "W10", "x" * 600]
)
async def test_a_cursor_we_did_not_hand_out_is_refused(api: httpx.AsyncClient, cursor: str) -> None:
    response = await api.get("/v1/batches", params={"cursor": cursor}, headers=SOLO)
    assert response.status_code in {400, 422}, response.text
    assert response.status_code == (422 if len(cursor) > 512 else 400)


@pytest.mark.parametrize("limit", [0, 101, -1])
async def test_list_limit_is_bounded(api: httpx.AsyncClient, limit: int) -> None:
    response = await api.get("/v1/batches", params={"limit": limit}, headers=SOLO)
    assert response.status_code == 422


async def test_paged_report_filters_sorts_and_pages_like_the_full_report(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    api.headers.update(SOLO)
    _, path = await make_corpus(60, seed=5)
    batch_id = await upload_as_path(api, path)
    await run_worker()
    full = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    url = f"/v1/batches/{batch_id}/files/page"

    pages = [
        (await api.get(url, params={"offset": o, "limit": 25})).json() for o in range(0, 75, 25)
    ]
    assert [p["total"] for p in pages] == [len(full)] * 3
    assert [f for p in pages for f in p["files"]] == full

    failed = (await api.get(url, params={"outcome": "failed", "limit": 500})).json()
    assert failed["files"] == [f for f in full if f["outcome"] == "failed"]
    assert failed["total"] == len(failed["files"]) > 0
    reason = failed["files"][0]["reason"]
    by_reason = (await api.get(url, params={"outcome": "failed", "reason": reason})).json()
    assert by_reason["files"] == [f for f in full if f["reason"] == reason][:50]
    counts = {(r["outcome"], r["reason"]): r["files"] for r in failed["reasons"]}
    assert sum(counts.values()) == len(full)

    needle = full[7]["name"][-8:].upper()  # case-insensitive
    found = (await api.get(url, params={"search": needle, "limit": 500})).json()
    assert found["files"] == [f for f in full if needle.lower() in f["name"].lower()]
    assert (await api.get(url, params={"search": "%"})).json()["total"] == sum(
        "%" in f["name"] for f in full
    )  # a LIKE wildcard is matched literally

    by_name = (await api.get(url, params={"sort": "-name", "limit": 500})).json()["files"]
    assert [f["name"] for f in by_name] == sorted((f["name"] for f in full), reverse=True)

    for bad in ({"sort": "name; drop table x"}, {"outcome": "nope"}, {"limit": 501}, {"x": 1}):
        assert (await api.get(url, params=bad)).status_code == 422, bad
    assert (await api.get(url, headers=GLOBEX)).status_code == 404


async def upload_as_path(api: httpx.AsyncClient, path: Path) -> str:
    response = await api.post(
        "/v1/batches",
        content=path.read_bytes(),
        headers={**SOLO, "Content-Type": "application/zip"},
    )
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    return batch_id


@pytest.mark.timeout(300)
async def test_report_and_list_queries_use_an_index_at_50000_files(
    db: asyncpg.Connection,
) -> None:
    batch_id, tenant = f"plan-{uuid.uuid4().hex}", f"plan-{uuid.uuid4().hex[:8]}"
    other = f"plan-{uuid.uuid4().hex}"
    await db.executemany(
        "INSERT INTO pdfqueue_batches (id, tenant, source_key, status) VALUES ($1, $2, 'k', 'X')",
        [(batch_id, tenant), (other, tenant)],
    )
    try:
        await db.execute(
            "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome, reason)"
            " SELECT $1, i, 'cv-' || i || '.pdf',"
            " (ARRAY['linked','failed','skipped_no_match'])[1 + i % 3],"
            " CASE WHEN i % 3 = 1 THEN 'encrypted' END FROM generate_series(0, 49999) i",
            batch_id,
        )
        # Other batches' rows, as in any real table: the plan must not scan them.
        await db.execute(
            "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome)"
            " SELECT $1, i, 'other-' || i || '.pdf', 'linked' FROM generate_series(0, 99999) i",
            other,
        )
        await db.execute("ANALYZE pdfqueue_files")
        queries = [FileQuery(sort=s) for s in _FILE_ORDER] + [
            FileQuery(outcome="failed"),
            FileQuery(outcome="failed", reason="encrypted", sort="name"),
        ]  # A name search reads the batch's rows (or the table, when the batch is most of it)
        for query in queries:
            where, args = _file_filters(batch_id, query)
            sql = (
                f"SELECT * FROM pdfqueue_files WHERE {where}"
                f" ORDER BY {_FILE_ORDER[query.sort]} LIMIT 50"
            )
            plan = "\n".join(r[0] for r in await db.fetch(f"EXPLAIN {sql}", *args))
            assert "Seq Scan" not in plan, (query, plan)
            assert "Index" in plan, (query, plan)
        await db.execute(  # a tenant with a long history, and others beside it
            "INSERT INTO pdfqueue_batches (id, tenant, source_key, status, created_at)"
            " SELECT $1 || '-' || i, CASE WHEN i % 2 = 0 THEN $2 ELSE $2 || 'x' END, 'k',"
            " 'COMPLETED', now() - i * interval '1 minute' FROM generate_series(1, 20000) i",
            batch_id,
            tenant,
        )
        await db.execute("ANALYZE pdfqueue_batches")
        plan = "\n".join(
            r[0]
            for r in await db.fetch(
                "EXPLAIN SELECT * FROM pdfqueue_batches WHERE tenant = $1"
                " ORDER BY created_at DESC, id DESC LIMIT 21",
                tenant,
            )
        )
        assert "pdfqueue_batches_by_tenant" in plan, plan
    finally:
        await db.execute("DELETE FROM pdfqueue_batches WHERE id = ANY($1)", [batch_id, other])
        await db.execute("DELETE FROM pdfqueue_batches WHERE id LIKE $1", f"{batch_id}-%")
