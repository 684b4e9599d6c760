"""Extraction in killable processes: hostile PDFs fail one file with a reason, never the worker."""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator

import pytest

from bench.documents import PRODUCERS, Density, render
from pdfqueue_dev.rawpdf import assemble
from pdfqueue_dev.samples import CLEAN, Expect, build_corpus, render_pdf
from pdfqueue_worker.emails import find_emails
from pdfqueue_worker.extract import (
    Extractor,
    Result,
    Unreadable,
    address_lines,
    read_pdf,
    read_pdf_pypdf,
)


@pytest.fixture(scope="module")
async def extractor() -> AsyncIterator[Extractor]:
    ex = Extractor(
        processes=2, timeout_s=10, max_pages=50, memory_bytes=512 * 1024**2, tasks_per_process=50
    )
    yield ex
    ex.close()


def brief(r: Result) -> tuple[str, list[str], int, bool, int | None]:
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


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no address\r\nat all",
        "name\r\nA.B@Example.COM | x@y.io\r\nmore x@y.io\nlast c@d.io",
        "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ\nsmall at: a\ufe6bb.io\n@\n@@ @x.io a@\nb.io",  # noqa: RUF001
        "one line without a break: a@b.io, c@d.io",
    ],
)
def test_scanning_only_lines_with_an_at_finds_the_same_addresses(text: str) -> None:
    assert find_emails(address_lines(text)) == find_emails(text)
