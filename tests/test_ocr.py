"""OCR of scanned pages in the capped parsing processes, and what happens without Tesseract."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pypdfium2 as pdfium
import pytest

from bench.labelled import ScanStyle, broken_pdf, fpdf_doc, layer_pdf, scan
from pdfqueue.domain.settings import Settings
from pdfqueue_worker import ocr
from pdfqueue_worker.candidates import Source
from pdfqueue_worker.extract import Extractor, read_pdf

ADDRESS = "grace.hopper.7@people.example"
SCAN = scan(fpdf_doc(["Grace Hopper", f"Berlin | {ADDRESS}"]), ScanStyle(), random.Random(3))


def make(**overrides: object) -> Extractor:
    options: dict[str, object] = {
        "processes": 1,
        "timeout_s": 20,
        "max_pages": 50,
        "memory_bytes": 320 * 1024**2,
        "tasks_per_process": 100,
        "ocr_max_pages": 2,
        "ocr_timeout_s": 120,
    }
    return Extractor(**(options | overrides))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
async def extractor() -> AsyncIterator[Extractor]:
    ex = make()
    yield ex
    ex.close()


@pytest.mark.timeout(300)
async def test_a_scan_is_read_by_ocr_under_the_memory_cap(extractor: Extractor) -> None:
    found = await extractor.extract(SCAN)
    assert [(c.address, c.source) for c in found.candidates] == [(ADDRESS, Source.OCR)]
    assert (found.ocr_pages, found.needs_ocr) == (1, False)


@pytest.mark.timeout(300)
async def test_a_text_layer_of_private_use_glyphs_is_read_by_ocr(extractor: Extractor) -> None:
    lines = ["Grace Hopper", f"Email: {ADDRESS}"]
    found = await extractor.extract(broken_pdf(lines, lambda code: chr(0xE000 + code)))
    assert found.emails == [ADDRESS]
    assert found.ocr_pages == 1


async def test_a_text_pdf_never_reaches_ocr(extractor: Extractor) -> None:
    found = await extractor.extract(layer_pdf(["Grace Hopper", ADDRESS]))
    assert (found.emails, found.ocr_pages) == ([ADDRESS], 0)


@pytest.mark.parametrize("ocr_max_pages", [0, 2])
async def test_without_tesseract_or_with_ocr_off_a_scan_needs_ocr(ocr_max_pages: int) -> None:
    """No language data (Tesseract not installed) and OCR turned off end the same way."""
    ex = make(ocr_max_pages=ocr_max_pages, tessdata="/nonexistent/tessdata")
    try:
        found = await ex.extract(SCAN)
    finally:
        ex.close()
    assert (found.emails, found.ocr_pages, found.needs_ocr) == ([], 0, True)


def test_the_text_pass_hands_over_at_the_first_page_without_text() -> None:
    found = read_pdf(SCAN, 50)
    assert (found.candidates, found.ocr_from, found.ocr_pages) == ((), 0, 0)


@pytest.mark.parametrize(
    ("text", "unusable"),
    [
        ("", True),
        (" \r\n ", True),
        ("Grace Hopper", False),
        ("\ufffd" * 10 + "ab", True),
        ("(cid:12)(cid:13)(cid:14) a", True),
        ("\ue000 Grace Hopper, Berlin", False),
    ],
)
def test_unusable_text_layers(text: str, unusable: bool) -> None:
    assert ocr.unusable(text) is unusable


def test_a_one_image_page_is_read_from_its_image_and_a_turned_one_rendered() -> None:
    document = pdfium.PdfDocument(SCAN)
    page = document[0]
    image = ocr.page_image(page)
    assert image.mode == "L"
    assert abs(image.width - 2480) <= 2  # the scan's own pixels (A4 at 300 DPI), not a render
    page.set_rotation(90)
    assert ocr._single_image(page) is None  # turned: rendered upright instead
    document.close()


def test_extractor_from_settings_takes_every_extraction_setting() -> None:
    settings = Settings(
        extract_processes=1,
        extract_timeout_s=3,
        extract_max_pages=7,
        extract_max_page_chars=1234,
        ocr_max_pages=1,
        ocr_timeout_s=9,
    )
    ex = Extractor.from_settings(settings, engine="pypdf")
    try:
        assert (ex.timeout_s, ex.max_pages, ex.max_page_chars) == (3, 7, 1234)
        assert (ex.ocr_max_pages, ex.ocr_timeout_s) == (1, 9)
    finally:
        ex.close()
