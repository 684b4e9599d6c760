"""Hostile page text against the worker's search and its parsing processes (both engines):
linear time on pages built to stall a regex, and the page cap."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fpdf import FPDF

from pdfqueue_worker.emails import find_emails
from pdfqueue_worker.extractor import Extractor
from pdfqueue_worker.parse import ENGINES

MEGABYTE = 1_000_000

# Shapes of page text that made the old single-regex search quadratic, or that stress an
# `@`-anchored one: a run of local-part characters, many `@`, long dotted domains, chains;
# with the addresses each holds (the old search finds the same on a short prefix).
HOSTILE_PAGES: dict[str, tuple[str, list[str]]] = {
    "local-part run": ("a" * MEGABYTE, []),
    "dotted run": ("a." * (MEGABYTE // 2), []),
    "many @": ("@" * MEGABYTE, []),
    "a@a@a": ("a@" * (MEGABYTE // 2), []),
    "long dotted domain": ("x@" + "a." * (MEGABYTE // 2), []),
    "runs of 64 then @": (("b" * 64 + "@") * (MEGABYTE // 65), []),
    "address chain": ("a@a.aa" * (MEGABYTE // 6), ["a@a.aaa", "a.aaa@a.aaa"]),
    "run then address": ("a" * MEGABYTE + " jane@example.com", ["jane@example.com"]),
}


@pytest.mark.timeout(5)
@pytest.mark.parametrize("shape", list(HOSTILE_PAGES))
def test_a_hostile_megabyte_page_is_searched_in_linear_time(shape: str) -> None:
    """Each shape in full (no page cap). The old search was quadratic on runs: the first two
    shapes would take hours. The 5 s bound is not a benchmark; linear work here takes well
    under one second."""
    page, expected = HOSTILE_PAGES[shape]
    assert find_emails(page, max_chars=len(page)) == expected


@pytest.mark.timeout(5)
def test_a_hostile_page_is_cut_at_the_page_cap_by_default() -> None:
    """The default search reads the first PDFQUEUE_EXTRACT_MAX_PAGE_CHARS of a page."""
    assert find_emails("a" * MEGABYTE + " jane@example.com") == []
    assert find_emails("jane@example.com " + "a" * MEGABYTE) == ["jane@example.com"]


def two_page_pdf(first: str, second: str) -> bytes:
    pdf = FPDF()
    pdf.set_font("helvetica", size=8)
    for text in (first, second):
        pdf.add_page()
        pdf.text(10, 10, text)
    return bytes(pdf.output())


@pytest.fixture(params=list(ENGINES))
async def capped_extractor(request: pytest.FixtureRequest) -> AsyncIterator[Extractor]:
    """One parsing process of each engine (PDFQUEUE_PDF_ENGINE): both face the hostile pages."""
    ex = Extractor(
        engine=request.param,
        processes=1,
        timeout_s=10,
        max_pages=50,
        memory_bytes=512 * 1024**2,
        tasks_per_process=10,
        max_page_chars=200_000,
    )
    yield ex
    ex.close()


@pytest.mark.timeout(60)
async def test_a_pdf_with_a_megabyte_of_local_part_characters_is_read_not_timed_out(
    capped_extractor: Extractor,
) -> None:
    """Through the real parsing process: page one is a megabyte of `a`, page two the address.
    The old search never finished page one (the parser was killed: `timeout`)."""
    data = two_page_pdf("a" * MEGABYTE, "Contact: Jane.Doe@Example.com")
    found = await capped_extractor.extract(data)
    assert found.emails == ["jane.doe@example.com"]
    assert found.pages == 2
    # The cap is the extractor's, not the module default: past 200,000 characters, unseen.
    late = lines_pdf(15, "x@late.example", 10)
    assert (await capped_extractor.extract(late)).emails == ["x@late.example"]
    later = lines_pdf(25, "x@late.example", 0)
    assert (await capped_extractor.extract(later)).emails == []


def lines_pdf(before: int, line: str, after: int) -> bytes:
    """One page: `before` lines of 10,000 `a`, then `line`, then `after` such lines. (PDFium
    keeps at most 32,767 characters of one text object, so long text comes in lines.)"""
    pdf = FPDF()
    pdf.set_font("helvetica", size=8)
    pdf.add_page()
    for y, text in enumerate(["a" * 10_000] * before + [line] + ["a" * 10_000] * after):
        pdf.text(10, 10 + y * 5, text)
    return bytes(pdf.output())
