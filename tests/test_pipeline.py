"""The whole pipeline on real Redis, PostgreSQL and S3: a ZIP in, users linked, exact counts."""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import math
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import CLEAN, Expect, render_pdf
from tests.support.helpers import GLOBEX, MakeCorpus, RunWorker, linked_user_ids, upload


async def wait_done(api: httpx.AsyncClient, batch_id: str) -> dict[str, object]:
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] in {"COMPLETED", "FAILED", "CANCELLED"}, status
    return status


@pytest.mark.parametrize(
    "per_job",
    [
        pytest.param(None, id="default-per-job"),
        pytest.param(1, id="one-per-job", marks=pytest.mark.settings(pdfs_per_job=1)),
    ],
)
async def test_batch_links_every_matching_user_and_counts_exactly(
    per_job: int | None,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    storage: Storage,
) -> None:
    corpus, path = await make_corpus(80, seed=3)
    batch_id = await upload(api, path)
    assert (await api.get(f"/v1/batches/{batch_id}")).json()["status"] == "PENDING"

    worker = await run_worker()
    runs = math.ceil(80 / (per_job or settings.pdfs_per_job))
    assert worker.jobs_complete == 1 + runs  # ingest, then the runs of PDFs

    status = await wait_done(api, batch_id)
    assert status["status"] == "COMPLETED"
    expected = corpus.counts()
    assert {k: status[k] for k in expected} == expected
    assert status["total_files"] == status["processed"] == 80
    assert status["ignored"] == 1  # notes.txt; the directory and __MACOSX entries are not files

    report = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    by_name = {r["name"]: r for r in report}
    assert by_name["notes.txt"] == {
        **by_name["notes.txt"],
        "outcome": "ignored",
        "reason": "not_a_pdf",
    }
    for f in corpus.files:
        row = by_name[f.name]
        assert row["outcome"] == f.expect.value, (f, row)
        if f.reason:
            assert row["reason"] == f.reason, (f, row)

    users = {
        r["id"]: r["pdf_url"] for r in await db.fetch(f'SELECT * FROM "{settings.users_table}"')
    }
    for f in corpus.files:
        if f.expect is Expect.LINKED:
            row = by_name[f.name]
            data = render_pdf(f, seed=3)
            key = f"pdfs/{row['user_id']}/{hashlib.sha256(data).hexdigest()}.pdf"
            assert users[row["user_id"]] == key == row["object_key"]
            assert await storage.read_range(key, 0, len(data) + 10) == data
    linked_users = sum(1 for f in corpus.files if f.expect is Expect.LINKED)
    legacy = sum(1 for u in corpus.users if u.pdf_url)
    assert sum(1 for url in users.values() if url) == linked_users + legacy


async def test_report_as_csv_and_final_summary_in_postgres(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, db: asyncpg.Connection
) -> None:
    corpus, path = await make_corpus(12, seed=4)
    batch_id = await upload(api, path)
    await run_worker()
    response = await api.get(f"/v1/batches/{batch_id}/files", params={"format": "csv"})
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 13  # 12 PDFs and notes.txt
    assert {r["outcome"] for r in rows} <= {
        "linked",
        "skipped_no_match",
        "skipped_already_exists",
        "failed",
        "ignored",
    }

    final = await db.fetchrow("SELECT * FROM pdfqueue_batches WHERE id = $1", batch_id)
    assert final["status"] == "COMPLETED"
    assert final["completed_at"] is not None
    assert final["processed"] == 12
    assert {k: final[k] for k in corpus.counts()} == corpus.counts()


async def test_multipart_upload_is_accepted(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    _corpus, path = await make_corpus(5, seed=5, mix=CLEAN)
    response = await api.post(
        "/v1/batches",
        files={
            "note": ("x.txt", b"not the file"),
            "file": (path.name, path.read_bytes(), "application/zip"),
        },
    )
    assert response.status_code == 202, response.text
    assert response.json()["status_url"].endswith(response.json()["batch_id"])
    await run_worker()
    status = await wait_done(api, response.json()["batch_id"])
    assert status["linked"] == 5


async def test_zip_of_only_non_pdfs_fails_saying_what_it_found_without_names(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    only_others = tmp_path / "others.zip"
    with zipfile.ZipFile(only_others, "w") as zf:
        zf.writestr("readme.txt", "hello")
        zf.writestr("Ann Smith CV.docx", b"PK not really")
        zf.writestr("docs/", "")  # a folder is no file
        zf.writestr("__MACOSX/._readme.txt", "")  # nor is an archiver's metadata
    batch_id = await upload(api, only_others)
    await run_worker()

    status = await wait_done(api, batch_id)
    assert status["status"] == "FAILED", status
    assert status["reason"] == "no_pdf_members"
    assert (status["total_files"], status["processed"], status["ignored"]) == (0, 0, 2)
    assert status["error"] == (
        "the ZIP holds 2 files and none is a PDF (1 .docx, 1 .txt);"
        " the batch's report lists them by name"
    )
    assert status["completed_at"] is not None
    report = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    assert {(r["name"], r["outcome"], r["reason"]) for r in report} == {
        ("readme.txt", "ignored", "not_a_pdf"),
        ("Ann Smith CV.docx", "ignored", "not_a_pdf"),
    }
    listed = (await api.get("/v1/batches")).json()["batches"]
    assert [(b["status"], b["reason"]) for b in listed if b["batch_id"] == batch_id] == [
        ("FAILED", "no_pdf_members")
    ]
    # The names are in the report only: not in the batch's words, nor in any log record.
    assert not [r.getMessage() for r in caplog.records if "Ann Smith" in r.getMessage()]


async def test_empty_zip_fails_with_no_pdf_members(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    assert len(empty.read_bytes()) == 22  # just an end-of-central-directory record
    batch_id = await upload(api, empty)
    await run_worker()

    status = await wait_done(api, batch_id)
    assert (status["status"], status["reason"]) == ("FAILED", "no_pdf_members")
    assert (status["total_files"], status["processed"], status["ignored"]) == (0, 0, 0)
    assert "holds no files" in status["error"]
    assert (await api.get(f"/v1/batches/{batch_id}/files")).json() == []


async def test_a_batch_of_three_pdfs_beside_other_files_completes(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    _, path = await make_corpus(3, seed=9, mix=CLEAN)  # with notes.txt beside them
    batch_id = await upload(api, path)
    await run_worker()

    status = await wait_done(api, batch_id)
    assert status["status"] == "COMPLETED", status
    assert (status["reason"], status["error"]) == (None, None)
    assert (status["total_files"], status["linked"], status["ignored"]) == (3, 3, 1)


async def test_same_pdf_twice_links_once_and_reports_duplicate(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, tmp_path: Path
) -> None:
    corpus, _ = await make_corpus(3, seed=6, mix=CLEAN)
    doubled = tmp_path / "doubled.zip"
    data = render_pdf(corpus.files[0], seed=6)
    with zipfile.ZipFile(doubled, "w") as zf:
        zf.writestr("a/one.pdf", data)
        zf.writestr("b/one-again.pdf", data)
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("a/one.pdf", data)  # the same name twice, too
    first = await upload(api, doubled)
    await run_worker()
    status = await wait_done(api, first)
    assert (status["linked"], status["skipped_already_exists"]) == (1, 2)
    reasons = {r["reason"] for r in (await api.get(f"/v1/batches/{first}/files")).json()}
    assert "duplicate" in reasons

    second = await upload(api, doubled)  # across ZIPs: still linked once
    await run_worker()
    status = await wait_done(api, second)
    assert (status["linked"], status["skipped_already_exists"]) == (0, 3)


async def test_two_resumes_of_one_user_in_one_job_link_once_and_leave_one_object(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    tmp_path: Path,
    s3_keys: Callable[[str], list[str]],
) -> None:
    """One claim statement serves a job; a user named twice in it is decided in a second."""
    corpus, _ = await make_corpus(2, seed=8, mix=CLEAN)
    one, other = render_pdf(corpus.files[0], seed=8), render_pdf(corpus.files[0], seed=9)
    assert one != other  # the same user's address, different content
    path = tmp_path / "twice.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("one.pdf", one)
        zf.writestr("neighbour.pdf", render_pdf(corpus.files[1], seed=8))
        zf.writestr("other.pdf", other)
    batch_id = await upload(api, path)
    await run_worker()
    status = await wait_done(api, batch_id)
    assert (status["linked"], status["skipped_already_exists"]) == (2, 1)
    files = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    assert {f["name"]: f["reason"] for f in files if f["outcome"] != "linked"} == {
        "other.pdf": "already_linked"
    }
    assert len(s3_keys("pdfs/")) == 2  # the losing copy was deleted


@pytest.mark.parametrize(
    ("body", "content_type", "code"),
    [
        (b"%PDF-1.7 not a zip", "application/zip", 422),
        (b"", "application/zip", 422),
        (b"PK\x03\x04" + b"\x00" * 200, "application/zip", 422),  # a ZIP signature, no directory
        (b"hello", "text/plain", 415),
    ],
)
async def test_not_a_zip_is_refused_and_nothing_is_left(
    api: httpx.AsyncClient, s3_keys: object, body: bytes, content_type: str, code: int
) -> None:
    response = await api.post("/v1/batches", content=body, headers={"Content-Type": content_type})
    assert response.status_code == code
    assert "ZIP" in response.json()["detail"] or "zip" in response.json()["detail"]
    assert s3_keys("uploads/") == []  # type: ignore[operator]


@pytest.mark.settings(max_upload_bytes=64 * 1024)
async def test_too_large_upload_is_refused_while_streaming(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, s3_keys: object
) -> None:
    _, path = await make_corpus(40, seed=7)
    data = path.read_bytes()
    assert len(data) > 64 * 1024

    async def chunks():  # no Content-Length: the limit must hold while streaming
        for i in range(0, len(data), 8192):
            yield data[i : i + 8192]

    response = await api.post(
        "/v1/batches", content=chunks(), headers={"Content-Type": "application/zip"}
    )
    assert response.status_code == 413
    assert s3_keys("uploads/") == []  # type: ignore[operator]
    declared = await api.post(
        "/v1/batches", content=data, headers={"Content-Type": "application/zip"}
    )
    assert declared.status_code == 413


async def test_tokens_and_tenants(api: httpx.AsyncClient, make_corpus: MakeCorpus) -> None:
    _, path = await make_corpus(2, seed=8, mix=CLEAN)
    batch_id = await upload(api, path)
    anonymous = await api.get(f"/v1/batches/{batch_id}", headers={"Authorization": ""})
    assert anonymous.status_code == 401
    wrong = await api.get(f"/v1/batches/{batch_id}", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    other_tenant = GLOBEX  # stored only as its sha256
    assert (await api.get(f"/v1/batches/{batch_id}", headers=other_tenant)).status_code == 404
    assert (await api.get(f"/v1/batches/{batch_id}/files", headers=other_tenant)).status_code == 404
    assert (await api.get(f"/v1/batches/{'0123456789abcdef' * 2}")).status_code == 404
    assert (await api.get("/v1/batches/0123456789abcdef")).status_code == 422  # not an id
    assert (await api.get("/healthz", headers={"Authorization": ""})).status_code == 200


async def test_health_ready_openapi_page_metrics(api: httpx.AsyncClient) -> None:
    assert (await api.get("/readyz")).json() == {
        "redis": "ok",
        "postgresql": "ok",
        "storage": "ok",
        "schema": "ok",
    }
    spec = (await api.get("/openapi.json")).json()
    assert {"/v1/batches", "/v1/batches/{batch_id}", "/v1/batches/{batch_id}/files"} <= set(
        spec["paths"]
    )
    assert "application/zip" in spec["paths"]["/v1/batches"]["post"]["requestBody"]["content"]
    page = await api.get("/")
    assert page.status_code == 200
    assert "<form" in page.text
    assert (await api.get("/metrics")).status_code == 200


def pages_pdf(*pages: str) -> bytes:
    """A PDF with one line of text per page."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for line in pages:
        pdf.add_page()
        pdf.cell(text=line)
    return bytes(pdf.output())


async def test_first_address_in_reading_order_that_is_a_user_wins_across_pages(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    tmp_path: Path,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    """Reading stops at the first page with an address; when those addresses are nobody's,
    it reads on (and a later page's user still wins over nobody)."""
    corpus, _ = await make_corpus(12, seed=31, mix=CLEAN)  # its users; its ZIP is not used
    a, b, c, d = [u for u in corpus.users if u.pdf_url is None][:4]
    path = tmp_path / "pages.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("1.pdf", pages_pdf("Referred by hr@formercorp.example", f"Mail: {a.email}"))
        zf.writestr("2.pdf", pages_pdf(f"{b.email} or jobs@recruit.example", f"{c.email}"))
        zf.writestr("3.pdf", pages_pdf("x@unknown.example", "y@unknown.example", "no address"))
        zf.writestr("4.pdf", pages_pdf(f"nobody@unknown.example then {d.email.upper()}"))
    batch_id = await upload(api, path)
    await run_worker()
    status = await wait_done(api, batch_id)
    assert (status["linked"], status["skipped_no_match"]) == (3, 1)
    files = {r["name"]: r for r in (await api.get(f"/v1/batches/{batch_id}/files")).json()}
    assert [files[n]["user_id"] for n in ("1.pdf", "2.pdf", "4.pdf")] == [a.id, b.id, d.id]
    assert (files["3.pdf"]["outcome"], files["3.pdf"]["reason"]) == ("skipped_no_match", "no_user")
    linked = await linked_user_ids(db, settings)
    assert {a.id, b.id, d.id} <= linked
    assert c.id not in linked


@pytest.mark.settings(extract_timeout_s=0.5, extract_max_pages=20_000)
async def test_a_pdf_that_hangs_the_parser_fails_alone_and_its_job_is_not_retried(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, tmp_path: Path
) -> None:
    from tests.unit.test_extract import pdf_with_stream

    corpus, _ = await make_corpus(6, seed=32, mix=CLEAN)
    text = b"".join(b"BT /F1 9 Tf 20 %d Td (line %d) Tj ET\n" % (i % 700, i) for i in range(200))
    path = tmp_path / "hang.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i, f in enumerate(corpus.files):
            zf.writestr(f"{i}.pdf", render_pdf(f, seed=32))
            if i == 2:  # in the middle of the job's run of PDFs
                zf.writestr("heavy.pdf", pdf_with_stream(text, pages=10_000))
    batch_id = await upload(api, path)
    worker = await run_worker()
    assert (worker.jobs_complete, worker.jobs_retried) == (2, 0)  # ingest, one process job
    status = await wait_done(api, batch_id)
    assert (status["processed"], status["linked"], status["failed"]) == (7, 6, 1)
    files = {r["name"]: r for r in (await api.get(f"/v1/batches/{batch_id}/files")).json()}
    assert (files["heavy.pdf"]["outcome"], files["heavy.pdf"]["reason"]) == ("failed", "timeout")


@pytest.mark.parametrize(("per_try", "linked"), [(3, 10), (0, 0)], ids=["progress", "none"])
@pytest.mark.settings(max_tries=2, pdfs_per_job=10, retry_base_delay_s=0.1, retry_max_delay_s=0.2)
async def test_a_try_cut_short_by_its_deadline_counts_only_if_it_recorded_nothing(
    per_try: int,
    linked: int,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job of scans needs several tries' parsing time: each try that records files runs
    again without spending a try, so it finishes however many it takes. The deadline is
    played by keeping `per_try` of each try's parsed PDFs (the real parse, stores and arq)."""
    from pdfqueue_worker.tasks import process

    extract_all = process._extract_all

    async def until_the_deadline(*args: Any, **kwargs: Any) -> dict[Any, Any]:
        parsed = await extract_all(*args, **kwargs)
        return dict(list(parsed.items())[:per_try])

    monkeypatch.setattr(process, "_extract_all", until_the_deadline)
    _, path = await make_corpus(10, seed=34, mix=CLEAN, junk=False)
    batch_id = await upload(api, path)
    worker = await run_worker()
    status = await wait_done(api, batch_id)
    assert (status["processed"], status["linked"]) == (10, linked)
    if per_try:  # 4 tries of the one job, 3 given back: more than max_tries, none failed
        assert (worker.jobs_retried, status["failed"]) == (3, 0)
    else:  # max_tries of no progress, then the last try records the timeout
        assert (worker.jobs_retried, status["failed"]) == (2, 10)
        rows = (await api.get(f"/v1/batches/{batch_id}/files")).json()
        assert {r["reason"] for r in rows} == {"timeout"}


@pytest.mark.settings(max_tries=2, retry_base_delay_s=0.1, retry_max_delay_s=0.2)
async def test_a_missing_users_table_is_said_at_start_and_in_every_outcome(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    caplog: pytest.LogCaptureFixture,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    _, path = await make_corpus(3, seed=33, mix=CLEAN)
    await db.execute(f'DROP TABLE "{settings.users_table}"')  # a deployment mistake
    batch_id = await upload(api, path)
    await run_worker()
    assert any(
        f"PDFQUEUE_USERS_TABLE {settings.users_table!r} does not exist" in r.getMessage()
        for r in caplog.records
        if r.levelname == "ERROR"
    )
    status = await wait_done(api, batch_id)
    assert (status["status"], status["failed"]) == ("COMPLETED", 3)
    reasons = {r["reason"] for r in (await api.get(f"/v1/batches/{batch_id}/files")).json()}
    assert reasons == {"database_schema_error", "not_a_pdf"}  # notes.txt is ignored
