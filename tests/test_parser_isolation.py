"""The parsing processes hold what is hostile: inflated members and no secret of the worker's."""

from __future__ import annotations

import os
import random
import struct
import tracemalloc
import zipfile
from pathlib import Path

import httpx
import pytest
from test_pipeline import wait_done

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.corpora.samples import CLEAN, build_corpus, render_pdf
from pdfqueue_worker.extractor import Extractor
from pdfqueue_worker.parse import ENGINES, KEPT_ENVIRONMENT
from tests.support.helpers import MakeCorpus, RunWorker, upload

MEMBER_BYTES = 64 * 1024**2
"""Half the parser's 128 MiB address space: with the interpreter, PDFium and the copies
inflating makes, a member this large cannot be read under the cap."""
BOMBS = 16


def child_environment(engine: str) -> dict[str, str]:
    """Runs in a parsing process, after its engine has read a PDF: what code parsing a
    hostile PDF could read."""
    ENGINES[engine](render_pdf(build_corpus(1, seed=40, mix=CLEAN).files[0], seed=40), 5)
    return dict(os.environ)


def bomb_content() -> bytes:
    """MEMBER_BYTES that deflate about 150:1, under the default ratio limit of 200."""
    rng = random.Random(3)
    block = rng.randbytes(6_500) + bytes(1024**2 - 6_500)
    return b"%PDF-1.4\n" + block * (MEMBER_BYTES // len(block) - 1)


@pytest.mark.parametrize("engine", list(ENGINES))
async def test_parsing_processes_see_no_secret(
    monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    secrets = {
        "PDFQUEUE_DATABASE_URL": "postgresql://pdfqueue:hunter2-db@db:5432/pdfqueue",
        "AWS_SECRET_ACCESS_KEY": "hunter2-aws",
        "PDFQUEUE_API_TOKENS": "acme:hunter2-token",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    extractor = Extractor(
        processes=1,
        timeout_s=10,
        max_pages=5,
        memory_bytes=512 * 1024**2,
        tasks_per_process=5,
        engine=engine,
    )
    try:
        seen = extractor.pool.schedule(child_environment, args=(engine,)).result(timeout=60)
    finally:
        extractor.close()
    assert set(seen) <= set(KEPT_ENVIRONMENT)
    assert seen.get("PATH") == os.environ["PATH"]  # what a parser may need is still there
    assert not any("hunter2" in value for value in seen.values())


def each_engine(**settings: object) -> pytest.MarkDecorator:
    """The test once per PDFQUEUE_PDF_ENGINE, with these settings."""
    return pytest.mark.parametrize(
        "engine",
        [
            pytest.param(e, marks=pytest.mark.settings(pdf_engine=e, **settings), id=e)
            for e in ENGINES
        ],
    )


@each_engine(max_pdf_bytes=MEMBER_BYTES, extract_memory_bytes=128 * 1024**2)
async def test_members_inflate_in_the_capped_parser_not_in_the_worker(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    tmp_path: Path,
    settings: Settings,
    engine: str,
) -> None:
    assert settings.pdf_engine == engine
    corpus, _ = await make_corpus(2, seed=41, mix=CLEAN)
    bomb = bomb_content()
    path = tmp_path / "bombs.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(BOMBS):  # one job's run of PDFs, every one at the size limit
            zf.writestr(f"bomb-{i:02d}.pdf", bomb)
        for f in corpus.files:
            zf.writestr(f.name, render_pdf(f, seed=41))
    del bomb
    batch_id = await upload(api, path)

    tracemalloc.start()
    try:
        await run_worker()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    status = await wait_done(api, batch_id)
    assert (status["processed"], status["linked"], status["failed"]) == (BOMBS + 2, 2, BOMBS)
    files = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    reasons = {r["name"]: (r["outcome"], r["reason"]) for r in files}
    assert {reasons[f"bomb-{i:02d}.pdf"] for i in range(BOMBS)} == {("failed", "too_large")}
    # 16 inflated members would be 1 GiB; the worker held their compressed bytes only
    assert peak < MEMBER_BYTES, f"the worker allocated {peak / 1024**2:.0f} MiB at its peak"


@each_engine()
async def test_a_member_whose_local_header_runs_past_the_read_is_read_on_and_linked(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    tmp_path: Path,
    settings: Settings,
    engine: str,
) -> None:
    assert settings.pdf_engine == engine
    corpus, _ = await make_corpus(3, seed=42, mix=CLEAN)
    path = tmp_path / "extra.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i, f in enumerate(corpus.files):
            info = zipfile.ZipInfo(f.name)
            if i == len(corpus.files) - 1:  # the last: nothing after it in the job's read
                info.extra = struct.pack("<HH", 0xCAFE, 3000) + bytes(3000)
            zf.writestr(info, render_pdf(f, seed=42))
    batch_id = await upload(api, path)
    await run_worker()
    status = await wait_done(api, batch_id)
    assert (status["processed"], status["linked"], status["failed"]) == (3, 3, 0)
