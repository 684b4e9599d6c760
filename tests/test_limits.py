"""Every documented limit (docs/user-guide/limits.md) is a setting, and breaking it is
answered in words that name it: an HTTP status and detail, a batch reason, or a file reason."""

from __future__ import annotations

import zipfile
from pathlib import Path

import httpx
import pytest

from pdfqueue_dev import refdocs
from pdfqueue_dev.corpora.samples import CLEAN, render_pdf
from tests.support.helpers import MakeCorpus, RunWorker, upload

ZIP = {"Content-Type": "application/zip"}


def test_every_limit_on_the_page_is_a_setting_named_there() -> None:
    page = refdocs.limits_page()
    for name, _, _ in refdocs.LIMITS:
        assert f"`PDFQUEUE_{name.upper()}`" in page


@pytest.mark.settings(max_upload_bytes=64 * 1024)
async def test_an_upload_over_the_byte_limit_is_413_naming_the_setting(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("a.pdf", b"%PDF-1.4\n" + b"x" * 100_000)
    response = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP)
    assert response.status_code == 413, response.text
    assert "PDFQUEUE_MAX_UPLOAD_BYTES" in response.json()["detail"]


@pytest.mark.settings(max_members=3)
async def test_a_zip_over_the_member_limit_is_413_naming_the_setting(
    api: httpx.AsyncClient, tmp_path: Path
) -> None:
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(4):
            zf.writestr(f"{i}.pdf", b"%PDF-1.4\n%%EOF\n")
    response = await api.post("/v1/batches", content=path.read_bytes(), headers=ZIP)
    assert response.status_code == 413, response.text
    assert "the limit is 3 (PDFQUEUE_MAX_MEMBERS)" in response.json()["detail"]


@pytest.mark.settings(max_total_uncompressed_bytes=200_000)
async def test_a_zip_that_unpacks_past_the_total_fails_the_batch_naming_the_setting(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path
) -> None:
    path = tmp_path / "roomy.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(3):
            zf.writestr(f"{i}.pdf", b"%PDF-1.4\n" + b"\0" * 100_000)  # deflates to little
    batch_id = await upload(api, path)
    await run_worker()
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert (status["status"], status["reason"]) == ("FAILED", "archive_rejected")
    assert "PDFQUEUE_MAX_TOTAL_UNCOMPRESSED_BYTES" in status["error"]


@pytest.mark.settings(max_pdf_bytes=10_000)
async def test_a_pdf_over_the_size_limit_fails_alone_with_too_large(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, tmp_path: Path
) -> None:
    corpus, _ = await make_corpus(1, seed=71, mix=CLEAN)
    path = tmp_path / "one-big.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("fine.pdf", render_pdf(corpus.files[0], seed=71))
        zf.writestr("big.pdf", b"%PDF-1.4\n" + b"x" * 20_000)
    batch_id = await upload(api, path)
    await run_worker()
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert (status["status"], status["total_files"], status["failed"]) == ("COMPLETED", 2, 1)
    report = {r["name"]: r for r in (await api.get(f"/v1/batches/{batch_id}/files")).json()}
    assert (report["big.pdf"]["outcome"], report["big.pdf"]["reason"]) == ("failed", "too_large")
