"""Extraction in killable processes: hostile PDFs fail one file with a reason, never the worker."""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest

from pdfqueue.stores.storage.local import FileBackend
from pdfqueue_dev.corpora.documents import PRODUCERS, Density, render
from pdfqueue_dev.corpora.rawpdf import assemble
from pdfqueue_dev.corpora.samples import CLEAN, Expect, build_corpus, render_pdf
from pdfqueue_dev.proctree import descendants, snapshot
from pdfqueue_worker.archive import Limits, list_members
from pdfqueue_worker.emails import find_emails
from pdfqueue_worker.extractor import Extractor, Unreadable
from pdfqueue_worker.parse import NO_OCR, Extraction, read_pdf, read_pdf_pypdf
from pdfqueue_worker.payload import Member, cut


@pytest.fixture(scope="module")
async def extractor() -> AsyncIterator[Extractor]:
    ex = Extractor(
        processes=2, timeout_s=10, max_pages=50, memory_bytes=512 * 1024**2, tasks_per_process=50
    )
    yield ex
    ex.close()


def brief(r: Extraction) -> tuple[str, list[str], int, bool, int | None]:
    """What both parsers must agree on: reason, addresses, pages, text, where reading stopped."""
    return r.reason, r.emails, r.pages, r.has_text, r.next_page


def pdf_with_stream(content: bytes, *, pages: int = 1) -> bytes:
    """A minimal valid PDF whose page content is `content` (Flate-compressed)."""
    stream = zlib.compress(content, 9)
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % (4 + i) for i in range(pages))
        + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    content_id = 4 + pages
    objs += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
        b" /Contents %d 0 R >>" % content_id
        for _ in range(pages)
    ]
    objs.append(
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream"
    )
    return assemble(objs)


async def test_known_resume_yields_the_users_email(extractor: Extractor) -> None:
    corpus = build_corpus(30, seed=11)
    for f in corpus.files:
        if f.expect is Expect.LINKED:
            found = await extractor.extract(render_pdf(f, seed=11))
            assert f.email in found.emails
            assert found.has_text


@pytest.mark.parametrize(
    ("kind", "reason"), [("encrypted", "encrypted"), ("corrupt", "unreadable")]
)
async def test_bad_pdfs_fail_with_a_reason(extractor: Extractor, kind: str, reason: str) -> None:
    f = next(f for f in build_corpus(200, seed=12).files if f.kind == kind)
    with pytest.raises(Unreadable) as caught:
        await extractor.extract(render_pdf(f, seed=12))
    assert caught.value.reason == reason


async def test_decompression_bomb_is_stopped(extractor: Extractor) -> None:
    bomb = pdf_with_stream(b"BT /F1 12 Tf 72 720 Td (x) Tj ET\n" + b" " * 300_000_000)
    assert len(bomb) < 1_000_000
    with pytest.raises(Unreadable) as caught:
        await extractor.extract(bomb)
    assert caught.value.reason == "too_large"  # PDFium aborted at the cap: not a crash
    ok = await extractor.extract(pdf_with_stream(b"BT /F1 12 Tf 72 720 Td (a@b.io) Tj ET"))
    assert ok.emails == ["a@b.io"]  # the pool survived


async def test_parser_over_its_time_limit_is_killed() -> None:
    slow = Extractor(
        processes=1, timeout_s=0.5, max_pages=20_000, memory_bytes=1024**3, tasks_per_process=5
    )
    try:
        text = b"".join(
            b"BT /F1 9 Tf 20 %d Td (line %d, no address, filler text) Tj ET\n" % (i % 700, i)
            for i in range(200)
        )
        # 10,000 pages sharing one content stream and no address: every page is read
        heavy = pdf_with_stream(text, pages=10_000)
        with pytest.raises(Unreadable) as caught:
            await slow.extract(heavy)
        assert caught.value.reason == "timeout"
        ok = await slow.extract(pdf_with_stream(b"BT /F1 12 Tf 72 720 Td (z@y.io) Tj ET"))
        assert ok.emails == ["z@y.io"]  # a fresh process replaced the killed one
    finally:
        slow.close()


async def test_no_text_and_not_a_pdf(extractor: Extractor) -> None:
    blank = await extractor.extract(pdf_with_stream(b"0 0 m 100 100 l S"))
    assert (blank.emails, blank.has_text) == ([], False)
    with pytest.raises(Unreadable):
        await extractor.extract(b"%PDF-1.4 garbage")


def test_emails_in_reading_order_normalized() -> None:
    # Full-width look-alikes on purpose: NFKC must fold them.
    text = "Ref: HR@FormerCorp.example, then Ｊａｎｅ＠Ｅｘａｍｐｌｅ．ｃｏｍ and hr@formercorp.example."  # noqa: RUF001
    assert find_emails(text) == ["hr@formercorp.example", "jane@example.com"]
    assert find_emails("no address here, just @ signs and a@b") == []
    assert find_emails("x.y+tag@sub.domain.co.uk;") == ["x.y+tag@sub.domain.co.uk"]


def test_reading_stops_at_the_first_page_with_an_address_and_resumes_there() -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for line in ("no address here", "a@x.io and b@y.io", "c@z.io", "d@w.io"):
        pdf.add_page()
        pdf.cell(text=line)
    data = bytes(pdf.output())
    assert brief(read_pdf(data, 50)) == ("", ["a@x.io", "b@y.io"], 4, True, 2)
    assert brief(read_pdf(data, 50, start_page=2)) == ("", ["c@z.io"], 4, True, 3)
    assert brief(read_pdf(data, 50, start_page=3)) == ("", ["d@w.io"], 4, True, None)
    assert brief(read_pdf(data, 2)) == ("", ["a@x.io", "b@y.io"], 4, True, None)  # page limit


def test_pdfium_reads_what_pypdf_read_on_the_sample_corpus() -> None:
    """Every kind of file (decoys, mixed case, addresses on a later page, encrypted, corrupt,
    no address): the same outcome, addresses and page counts as the parser before."""
    corpus = build_corpus(120, seed=21)
    for f in corpus.files:
        data = render_pdf(f, seed=21)
        assert brief(read_pdf(data, 50)) == brief(read_pdf_pypdf(data, 50)), f
        one, other = read_pdf(data, 50, start_page=1), read_pdf_pypdf(data, 50, start_page=1)
        assert brief(one) == brief(other), f


@pytest.mark.parametrize("density", [Density.TYPICAL, Density.LONG])
def test_pdfium_reads_what_pypdf_read_on_dense_resumes(density: Density) -> None:
    files = build_corpus(12 * len(PRODUCERS), seed=22, mix=CLEAN).files
    for f in files:  # producers take turns by file number
        data = render(f, density, 22)
        new = read_pdf(data, 50)
        assert brief(new) == brief(read_pdf_pypdf(data, 50)), f
        assert new.emails == [f.email]
        if new.next_page is not None:  # and reading on from where it stopped
            more = read_pdf(data, 50, new.next_page)
            assert brief(more) == brief(read_pdf_pypdf(data, 50, new.next_page)), f


def test_both_engines_name_a_drawn_page_without_text_needs_ocr_and_an_empty_one_not() -> None:
    """What the pypdf engine (which has no OCR) says of a page drawn without a text layer, as
    PDFium's read says with OCR off: `needs_ocr`, not a file without text."""
    drawn, empty = pdf_with_stream(b"0 0 m 100 100 l S"), pdf_with_stream(b"")
    for engine in (read_pdf_pypdf, partial(read_pdf, how=NO_OCR)):
        assert engine(drawn, 50).needs_ocr, engine
        assert not engine(empty, 50).needs_ocr, engine


def zip_items(tmp_path: Path, pdfs: list[bytes]) -> list[tuple[bytes, Member, int]]:
    """`pdfs` as a process job holds them: each member's compressed bytes, read from page 0."""
    with zipfile.ZipFile(tmp_path / "a.zip", "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i, data in enumerate(pdfs):
            zf.writestr(f"{i:03}.pdf", data)
    limits = Limits(
        max_members=1000,
        max_member_bytes=10**9,
        max_total_bytes=10**10,
        max_ratio=10**9,
        max_directory_bytes=10**6,
    )
    listing = list_members(FileBackend(tmp_path), "a.zip", limits)
    data = (tmp_path / "a.zip").read_bytes()
    return [(cut(data, 0, m)[0], m, 0) for m in listing.pdfs]


async def read_all(
    ex: Extractor, items: list[tuple[bytes, Member, int]], *, together: bool
) -> dict[int, tuple[str, list[str], int, bool, int | None] | str]:
    """Each item's `brief`, or the reason it is unreadable."""
    out: dict[int, tuple[str, list[str], int, bool, int | None] | str] = {}
    async for i, r in ex.extract_members(items, together=together):
        out[i] = r.reason if isinstance(r, Unreadable) else brief(r)
    return out


async def test_a_group_reads_what_each_pdf_read_alone_reads(
    tmp_path: Path, extractor: Extractor, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = build_corpus(60, seed=13).files
    pdfs = [render_pdf(f, seed=13) for f in files]
    pdfs += [b"%PDF-1.4 garbage", b"not a pdf at all", pdf_with_stream(b"0 0 m 100 100 l S")]
    items = zip_items(tmp_path, pdfs)
    tasks: list[object] = []
    schedule = extractor.pool.schedule
    monkeypatch.setattr(
        extractor.pool, "schedule", lambda fn, **kw: tasks.append(fn) or schedule(fn, **kw)
    )
    together = await read_all(extractor, items, together=True)
    groups = len(tasks)
    alone = await read_all(extractor, items, together=False)
    assert together == alone
    assert sorted(together) == list(range(len(items)))
    assert {together[len(pdfs) - 3], together[len(pdfs) - 2]} == {"unreadable", "not_a_pdf"}
    assert sum(1 for f in files if f.kind == "encrypted") == sum(
        1 for r in together.values() if r == "encrypted"
    )
    # the text pass of 63 PDFs took a few group tasks, not one task each
    assert groups < 10 < len(tasks) - groups


async def test_a_pdf_that_kills_its_group_fails_alone(tmp_path: Path) -> None:
    """A PDF that hangs the parser or aborts it at the memory cap takes its group's task
    down; the group's other PDFs are read again one by one and only that PDF fails."""
    # 3 s: a clean PDF read alone, on a replacement process, stays well within it on a loaded
    # host (1 s did not, under CI's load); the heavy PDF takes some 30 s of CPU on its own.
    ex = Extractor(
        processes=1, timeout_s=3.0, max_pages=20_000, memory_bytes=512 * 1024**2,
        tasks_per_process=50,
    )  # fmt: skip
    try:
        filler = b"".join(
            b"BT /F1 9 Tf 20 %d Td (line %d, no address, filler text) Tj ET\n" % (i % 700, i)
            for i in range(200)
        )
        heavy = pdf_with_stream(filler, pages=10_000)  # no address: every page is read
        bomb = pdf_with_stream(b"BT /F1 12 Tf 72 720 Td (x) Tj ET\n" + b" " * 300_000_000)
        clean = [pdf_with_stream(b"BT /F1 12 Tf 72 720 Td (p%d@q.io) Tj ET" % i) for i in range(4)]
        items = zip_items(tmp_path, [clean[0], heavy, clean[1], bomb, clean[2], clean[3]])
        got = await read_all(ex, items, together=True)
        assert got[1] == "timeout"
        assert got[3] == "too_large"
        assert [got[i] for i in (0, 2, 4, 5)] == [
            ("", [f"p{i}@q.io"], 1, True, None) for i in range(4)
        ]
    finally:
        ex.close()


def below_me() -> set[int]:
    """This process and every process below it."""
    return set(descendants(os.getpid(), snapshot()))


async def test_start_brings_up_every_parsing_process_before_the_first_pdf() -> None:
    """The worker calls `start` before it takes a job: a cold pool's start would otherwise be
    paid inside the first job's time."""
    before = below_me()
    ex = Extractor(
        processes=3, timeout_s=10, max_pages=50, memory_bytes=512 * 1024**2, tasks_per_process=50
    )
    try:
        assert below_me() == before  # pebble starts nothing until asked
        await ex.start()
        # the three parsing processes (and the forkserver above them, unless it already ran)
        assert len(below_me() - before) >= 3
    finally:
        ex.close()
