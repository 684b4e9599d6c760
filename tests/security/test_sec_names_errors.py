"""Names and errors against the real stores: no member name strands a batch, and no error a
store answers is reported as an outage it is not (PostgreSQL, Redis, S3, the cursor)."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path

import asyncpg
import boto3
import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import (
    DependencyMisconfigured,
    InvalidData,
    ObjectNotFound,
    RedisRejected,
    StorageRejected,
)
from pdfqueue.domain.models import Decision, FileRef, Outcome, failed
from pdfqueue.domain.names import MAX_MEMBER_NAME_BYTES, REPLACEMENT
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.redis.state import BatchState
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import CLEAN, render_pdf
from tests.support.helpers import MakeCorpus, RunWorker, upload

ASCII_LONG = "resume-" + "a" * 3000 + ".pdf"
"""About 3 KB: the btree index over (batch, name, idx) refused names past ~2.7 KB."""
CJK_LONG = "\u5c65\u6b74\u66f8" * 320 + ".pdf"
"""960 CJK characters, 2.9 KB of UTF-8."""
TEXT_LONG = "notes-" + "n" * 3000 + ".txt"
"""Not a PDF: reported as ignored, never counted, and it no longer fails the archive."""
ODD = "tab\there\x7f\u202egpj.pdf"
"""Fits, and holds controls and a bidi override: data, stored as the ZIP has it."""


def _files(report: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(f["name"]): f for f in report}


@pytest.mark.timeout(120)
async def test_long_member_names_fail_alone_and_the_batch_completes(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    tmp_path: Path,
) -> None:
    corpus, _ = await make_corpus(5, seed=61, mix=CLEAN)
    pdfs = [render_pdf(f, seed=61) for f in corpus.files]
    path = tmp_path / "long-names.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("first.pdf", pdfs[0])
        zf.writestr(ASCII_LONG, pdfs[1])
        zf.writestr(TEXT_LONG, "hello")
        zf.writestr(CJK_LONG, pdfs[2])
        zf.writestr("last.pdf", pdfs[3])
        zf.writestr(ODD, pdfs[4])
    batch_id = await upload(api, path)
    await run_worker()

    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    assert (status["total_files"], status["processed"], status["ignored"]) == (5, 5, 1)
    assert (status["linked"], status["failed"]) == (3, 2)

    report = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    assert len(report) == 6  # each member once, the ignored one included
    by_outcome = {f["outcome"]: 0 for f in report}
    for f in report:
        by_outcome[f["outcome"]] += 1
    assert by_outcome == {"linked": 3, "failed": 2, "ignored": 1}
    for f in report:
        assert len(str(f["name"]).encode()) <= MAX_MEMBER_NAME_BYTES
        assert "\x00" not in str(f["name"])
    long_ones = [f for f in report if f["outcome"] != "linked"]
    reasons = sorted((str(f["name"])[:7], f["reason"]) for f in long_ones)
    assert reasons == [
        ("notes-n", "not_a_pdf"),
        ("resume-", "name_too_long"),
        ("\u5c65\u6b74\u66f8\u5c65\u6b74\u66f8\u5c65", "name_too_long"),
    ]
    assert all(str(f["name"]).endswith((".pdf", ".txt")) for f in long_ones)  # the end is kept

    linked = _files([f for f in report if f["outcome"] == "linked"])
    assert set(linked) == {"first.pdf", "last.pdf", ODD}
    table = settings.users_table
    for f, pdf_name in ((corpus.files[0], "first.pdf"), (corpus.files[3], "last.pdf")):
        url = await db.fetchval(f'SELECT pdf_url FROM "{table}" WHERE email = $1', f.email)
        assert url is not None
        assert url.endswith(str(linked[pdf_name]["sha256"]) + ".pdf")
    for f in (corpus.files[1], corpus.files[2]):  # the long-named files linked nobody
        assert await db.fetchval(f'SELECT pdf_url FROM "{table}" WHERE email = $1', f.email) is None
    # the tenant's concurrent-batch slot is free again: nothing of the batch is left running
    active = await db.fetchval(
        "SELECT count(*) FROM pdfqueue_batches WHERE id = $1 AND status <> 'COMPLETED'", batch_id
    )
    assert active == 0


def _flag_invalid_utf8(path: Path, good: bytes, bad: bytes) -> None:
    """Replace `good` (in a UTF-8-flagged member name) by `bad` everywhere in the archive:
    the local header and the central directory then name the member with invalid UTF-8."""
    data = path.read_bytes()
    assert data.count(good) == 2
    path.write_bytes(data.replace(good, bad))


@pytest.mark.timeout(120)
async def test_a_name_that_is_not_its_claimed_utf8_fails_that_file_not_the_archive(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    tmp_path: Path,
) -> None:
    corpus, _ = await make_corpus(2, seed=62, mix=CLEAN)
    path = tmp_path / "bad-utf8.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("caf\u00e9-XYZ.pdf", render_pdf(corpus.files[0], seed=62))  # UTF-8 flagged
        zf.writestr("fine.pdf", render_pdf(corpus.files[1], seed=62))
    _flag_invalid_utf8(path, "caf\u00e9-XYZ".encode(), b"caf\xff\xfe-XYZ")
    batch_id = await upload(api, path)
    await run_worker()

    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    assert (status["processed"], status["linked"], status["failed"]) == (2, 1, 1)
    report = _files((await api.get(f"/v1/batches/{batch_id}/files")).json())
    assert report[f"caf{REPLACEMENT}{REPLACEMENT}-XYZ.pdf"]["reason"] == "unsafe_name"
    assert report["fine.pdf"]["outcome"] == "linked"


@pytest.fixture
async def files(settings: Settings, db: asyncpg.Connection) -> FileStore:
    """The real store, on a batch of this test's own (its rows go with the batch)."""
    pool = await connect(settings.database_url, max_size=2)
    return FileStore(pool, UsersTable.of(settings))


async def _new_batch(files: FileStore) -> str:
    batch_id = uuid.uuid4().hex
    await BatchStore(files.pool).create(
        batch_id, "acme", f"uploads/{batch_id}.zip", queue_name="pdfqueue:queue"
    )
    return batch_id


async def test_a_per_file_write_cannot_fail_on_the_files_own_data(files: FileStore) -> None:
    """Names no PostgreSQL text takes (NUL, a lone surrogate), a huge one, and a value the
    database refuses (a user id past bigint): each file gets a row, its neighbours theirs."""
    try:
        batch_id = await _new_batch(files)
        rows = {
            FileRef(batch_id, 0, "nul\x00inside.pdf"): failed("corrupt_member"),
            FileRef(batch_id, 1, "lone\ud800surrogate.pdf"): failed("corrupt_member"),
            FileRef(batch_id, 2, "x" * 5000 + "\U0001f600" * 2000 + ".pdf"): failed("no_text"),
            FileRef(batch_id, 3, "refused.pdf"): Decision(
                Outcome.SKIPPED_NO_MATCH, "no_user", 2**70
            ),
            FileRef(batch_id, 4, "neighbour.pdf"): Decision(Outcome.SKIPPED_NO_MATCH, "no_email"),
        }
        stored = await files.record(batch_id, rows)
        assert {i: (d.outcome, d.reason) for i, d in stored.items()} == {
            0: (Outcome.FAILED, "corrupt_member"),
            1: (Outcome.FAILED, "corrupt_member"),
            2: (Outcome.FAILED, "no_text"),
            3: (Outcome.FAILED, "invalid_data"),
            4: (Outcome.SKIPPED_NO_MATCH, "no_email"),
        }
        names = {f.index: f.name for f in await files.read(batch_id)}
        assert names[0] == f"nul{REPLACEMENT}inside.pdf"
        assert names[1] == f"lone{REPLACEMENT}surrogate.pdf"
        assert len(names[2].encode()) <= MAX_MEMBER_NAME_BYTES
        assert names[2].endswith(".pdf")
        assert names[3] == "refused.pdf"  # its row: failed, without the value refused
        assert names[4] == "neighbour.pdf"

        await files.record_ignored(batch_id, [(5, "n\x00" * 3000 + ".txt", "not_a_pdf")])
        ignored = [f for f in await files.read(batch_id) if f.index == 5]
        assert ignored[0].outcome == "ignored"
        assert len(ignored[0].name.encode()) <= MAX_MEMBER_NAME_BYTES
    finally:
        await files.pool.close()


async def test_a_data_error_is_invalid_data_not_an_outage(files: FileStore) -> None:
    try:
        with pytest.raises(InvalidData) as caught:
            await BatchStore(files.pool).newest("acme\x00", before=None, limit=1)
        assert caught.value.http_status == 422
        assert caught.value.sqlstate == "22021"
        assert "\x00" not in str(caught.value)
        assert "acme" not in caught.value.public_detail()
    finally:
        await files.pool.close()


def _cursor(created: object, batch_id: object) -> str:
    raw = json.dumps([created, batch_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param(_cursor("0001-01-01T00:00:00+14:00", "0" * 32), id="before-year-1-in-utc"),
        pytest.param(_cursor("9999-12-31T23:59:59-14:00", "0" * 32), id="past-9999-in-utc"),
        pytest.param(_cursor("2026-01-01T00:00:00+00:00", "\x00" * 32), id="nul-id"),
        pytest.param(_cursor("2026-01-01T00:00:00+00:00", "not-a-batch-id"), id="not-an-id"),
        pytest.param(_cursor("2026-01-01T00:00:00+00:00", "\ud800" * 32), id="surrogate-id"),
        pytest.param(
            base64.urlsafe_b64encode(b'{"2026-01-01T00:00:00+00:00": 1, "x": 2}')
            .decode()
            .rstrip("="),
            id="not-a-list",
        ),
    ],
)
async def test_a_forged_cursor_answers_400_whatever_its_fields_hold(
    api: httpx.AsyncClient, cursor: str
) -> None:
    response = await api.get("/v1/batches", params={"cursor": cursor})
    assert response.status_code == 400, response.text
    assert response.json()["detail"].startswith("invalid cursor")


async def test_a_handed_out_cursor_still_pages(api: httpx.AsyncClient, tmp_path: Path) -> None:
    path = tmp_path / "one.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.pdf", b"%PDF-1.4\n%%EOF\n")
    for _ in range(2):
        await upload(api, path)
    first = (await api.get("/v1/batches", params={"limit": 1})).json()
    rest = await api.get("/v1/batches", params={"limit": 1, "cursor": first["next_cursor"]})
    assert rest.status_code == 200, rest.text
    assert rest.json()["batches"][0]["batch_id"] != first["batches"][0]["batch_id"]


async def test_a_command_redis_refuses_is_rejected_not_unavailable(redis: Redis) -> None:
    """WRONGTYPE is the state's fault (or a bug): no retry cures it, Redis is not down."""
    batch_id = uuid.uuid4().hex
    state = BatchState(redis, ttl_s=60)
    key = keys.batch(batch_id)
    await redis.set(key, "not a hash", ex=60)
    try:
        with pytest.raises(RedisRejected) as caught:
            await state.status(batch_id)
        assert "WRONGTYPE" in str(caught.value)
    finally:
        await redis.delete(key)


async def test_redis_refusing_the_password_is_a_configuration_error(settings: Settings) -> None:
    client = Redis.from_url(settings.redis_url, password="wrong-password-for-the-test")
    try:
        with pytest.raises(DependencyMisconfigured) as caught:
            await BatchState(client, ttl_s=60).status(uuid.uuid4().hex)
        assert caught.value.service == "redis"
    finally:
        await client.aclose()


async def test_s3_refusing_the_credentials_is_a_configuration_error(
    settings: Settings, storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On both S3 paths: boto3's (size, uploads) and the native one (GET, PUT, DELETE)."""
    await storage.put("probe.pdf", b"%PDF-1.4\n")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-of-this-store")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it caches the credentials it read
    wrong = Storage.from_settings(settings, threads=2)
    try:
        with pytest.raises(DependencyMisconfigured) as caught:
            await wrong.size("probe.pdf")
        assert caught.value.service == "storage"
        assert caught.value.http_status == 500
        with pytest.raises(DependencyMisconfigured):
            await wrong.read_range("probe.pdf", 0, 4)
        with pytest.raises(DependencyMisconfigured):
            await wrong.put("other.pdf", b"%PDF-1.4\n")
    finally:
        await wrong.aclose()
    with pytest.raises(ObjectNotFound):  # a missing object is still that, on both paths
        await storage.read_range("missing.pdf", 0, 4)
    with pytest.raises(ObjectNotFound):
        await storage.size("missing.pdf")


@pytest.mark.parametrize("field", ["search", "reason"])
async def test_a_report_filter_postgresql_refuses_answers_422_not_503(
    api: httpx.AsyncClient, tmp_path: Path, field: str
) -> None:
    """Text no PostgreSQL text takes (a NUL) in a filter is the request's fault."""
    path = tmp_path / "one.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.pdf", b"%PDF-1.4\n%%EOF\n")
    batch_id = await upload(api, path)
    response = await api.get(f"/v1/batches/{batch_id}/files/page", params={field: "a\x00b"})
    assert response.status_code == 422, response.text
    assert "SQLSTATE 22021" in response.json()["detail"]
    assert "a\x00b" not in response.text


@pytest.mark.timeout(120)
async def test_a_link_postgresql_refuses_fails_that_file_and_no_other(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    tmp_path: Path,
    s3_keys: Callable[[str], list[str]],
) -> None:
    """The host application's table refuses one user's link (a CHECK constraint: SQLSTATE
    23514). That file fails with invalid_data at once, its neighbours in the same job link,
    and nothing is retried as if PostgreSQL were down."""
    corpus, _ = await make_corpus(4, seed=63, mix=CLEAN)
    table = settings.users_table
    refused = corpus.files[1]
    user_id = await db.fetchval(f'SELECT id FROM "{table}" WHERE email = $1', refused.email)
    await db.execute(
        f'ALTER TABLE "{table}" ADD CONSTRAINT refuses_one'
        f" CHECK (id <> {int(user_id)} OR pdf_url IS NULL)"
    )
    path = tmp_path / "refused.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i, f in enumerate(corpus.files):
            zf.writestr(f"{i}.pdf", render_pdf(f, seed=63))
    batch_id = await upload(api, path)
    worker = await run_worker()

    assert worker.jobs_retried == 0
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    assert (status["processed"], status["linked"], status["failed"]) == (4, 3, 1)
    report = _files((await api.get(f"/v1/batches/{batch_id}/files")).json())
    assert (report["1.pdf"]["outcome"], report["1.pdf"]["reason"]) == ("failed", "invalid_data")
    assert all(report[f"{i}.pdf"]["outcome"] == "linked" for i in (0, 2, 3))
    assert await db.fetchval(f'SELECT pdf_url FROM "{table}" WHERE id = $1', user_id) is None
    assert len(s3_keys("pdfs/")) == 3  # the refused file's copy is not left behind


@pytest.mark.timeout(120)
async def test_a_put_the_object_store_refuses_fails_that_file_and_no_other(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store answers one file's PUT with 413 (as S3 does past its object size): the
    real store stays underneath and takes every other PUT. That file fails storage_rejected
    at once, its neighbours in the same job are decided and linked, nothing is retried."""
    corpus, _ = await make_corpus(4, seed=64, mix=CLEAN)
    pdfs = [render_pdf(f, seed=64) for f in corpus.files]
    too_big = hashlib.sha256(pdfs[2]).hexdigest()
    real_put = Storage.put

    async def put(self: Storage, key: str, data: bytes, **kwargs: str | None) -> None:
        if hashlib.sha256(data).hexdigest() == too_big:
            raise StorageRejected(413, "EntityTooLarge")
        await real_put(self, key, data, **kwargs)

    monkeypatch.setattr(Storage, "put", put)
    path = tmp_path / "too-big.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i, pdf in enumerate(pdfs):
            zf.writestr(f"{i}.pdf", pdf)
    batch_id = await upload(api, path)
    worker = await run_worker()

    assert worker.jobs_retried == 0
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    assert (status["processed"], status["linked"], status["failed"]) == (4, 3, 1)
    report = _files((await api.get(f"/v1/batches/{batch_id}/files")).json())
    assert (report["2.pdf"]["outcome"], report["2.pdf"]["reason"]) == ("failed", "storage_rejected")
    assert all(report[f"{i}.pdf"]["outcome"] == "linked" for i in (0, 1, 3))
    table = settings.users_table
    email = corpus.files[2].email
    assert await db.fetchval(f'SELECT pdf_url FROM "{table}" WHERE email = $1', email) is None
