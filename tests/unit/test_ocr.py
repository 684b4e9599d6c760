"""OCR of scanned pages in the capped parsing processes, and what happens without Tesseract."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.corpora.labelled import ScanStyle, broken_pdf, cached, fpdf_doc, layer_pdf, scan
from pdfqueue_dev.processes import wait_until_async
from pdfqueue_worker import ocr
from pdfqueue_worker.candidates import Source, page_candidates
from pdfqueue_worker.extractor import Extractor, Unreadable
from pdfqueue_worker.parse import read_pdf, read_pdf_pypdf
from pdfqueue_worker.payload import Member
from tests.unit.test_extract import zip_items

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


def scans(tmp_path: Path, n: int, dpi: int = 150) -> list[tuple[bytes, Member, int]]:
    """A job's items: `n` scans (by default at 150 dpi, quick to OCR), each naming an address."""
    tmp_path.mkdir()
    pages = [fpdf_doc([f"Person {k}", f"person.{k}@people.example"]) for k in range(n)]
    return zip_items(
        tmp_path, [scan(p, ScanStyle(dpi=dpi), random.Random(k)) for k, p in enumerate(pages)]
    )


@pytest.mark.timeout(300)
async def test_jobs_with_scans_take_turns_at_ocr(tmp_path: Path) -> None:
    """Two jobs' scans, one parsing process: the second job's first scan is read before the
    first job's last, so no job's try runs out waiting behind another job's scans."""
    ex = make()
    done: list[tuple[str, int]] = []

    async def job(name: str) -> None:
        async for i, result in ex.extract_members(scans(tmp_path / name, 3)):
            assert not isinstance(result, Unreadable), result
            assert result.emails == [f"person.{i}@people.example"]
            done.append((name, i))

    try:
        await asyncio.gather(job("a"), job("b"))
    finally:
        ex.close()
    assert done.index(("b", 0)) < done.index(("a", 2)), done


@pytest.mark.timeout(300)
async def test_scans_that_would_wait_past_the_deadline_for_a_turn_are_deferred(
    tmp_path: Path, extractor: Extractor
) -> None:
    """With the turn taken by another job's scans, a job whose deadline is near does not
    queue: its scans come back `Deferred`, for a try that does not count. The other job
    reads all of its scans."""
    loop = asyncio.get_running_loop()

    async def job(name: str, dpi: int, until: float) -> list[object]:
        reads = extractor.extract_members(scans(tmp_path / name, 2, dpi), until=until)
        return [type(result).__name__ async for _, result in reads]

    busy = asyncio.create_task(job("busy", 300, loop.time() + 600))
    await wait_until_async(
        lambda: extractor.ocr_load > 0, "the busy job's first OCR pass", interval_s=0.01
    )
    assert await job("late", 150, loop.time() + 0.1) == ["Deferred", "Deferred"]
    assert await busy == ["Extraction", "Extraction"]


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


@pytest.mark.timeout(900)
def test_the_region_first_read_finds_the_whole_pages_addresses_on_the_labelled_scans() -> None:
    """On every scan of the labelled corpus (tests/test_labelled_corpus.py's), the users'
    addresses read from the first band with a candidate are those of the whole page, and
    the bands were enough (no scan fell back to the whole page)."""
    users, files = cached(20, 8, seed=14)
    known = {u.email for u in users}
    differ, whole_page = [], []
    for label, data in files:
        if label.layer != "scan":
            continue
        document = pdfium.PdfDocument(data)
        page = document[0]
        try:
            region, band = ocr.read(page, None, ocr.REGION_FIRST)
            whole, _ = ocr.read(page, None, ocr.WHOLE_PAGE)
        finally:
            page.close()
            document.close()
        if band is None:
            whole_page.append(label.name)
        if (addresses := _addresses(region, known)) != _addresses(whole, known):
            differ.append((label.name, addresses, _addresses(whole, known)))
    assert differ == []
    assert whole_page == []


def _addresses(text: str, known: set[str]) -> set[str]:
    return {c.address for c in page_candidates(text, 0, source=Source.OCR)} & known


def test_a_page_without_an_address_in_its_bands_is_read_whole() -> None:
    """An address in the middle of the page, outside both bands: the whole page is read."""
    middle = ["Grace Hopper", *["Experience at a firm"] * 18, f"Write to {ADDRESS}"]
    document = pdfium.PdfDocument(scan(fpdf_doc(middle), ScanStyle(), random.Random(5)))
    page = document[0]
    try:
        text, band = ocr.read(page, None, ocr.REGION_FIRST)
    finally:
        page.close()
        document.close()
    assert band is None
    assert ADDRESS in {c.address for c in page_candidates(text, 0, source=Source.OCR)}


def test_a_scan_a_few_pixels_high_is_read_without_an_empty_band() -> None:
    """A 15 % band of a 3-pixel image would have no rows, which Tesseract refuses."""
    from fpdf import FPDF
    from PIL import Image

    pdf = FPDF(format="A4")
    pdf.add_page()
    pdf.image(Image.new("L", (40, 3), 0), x=0, y=0, w=210, h=297)
    document = pdfium.PdfDocument(bytes(pdf.output()))
    page = document[0]
    try:
        text, band = ocr.read(page, None, ocr.REGION_FIRST)
    finally:
        page.close()
        document.close()
    assert (text.strip(), band) == ("", None)


def test_an_address_in_a_scans_footer_is_read_from_the_bottom_band() -> None:
    pdf = fpdf_doc(["Grace Hopper", "Berlin"], footer=f"Grace Hopper - {ADDRESS} - page 1")
    document = pdfium.PdfDocument(scan(pdf, ScanStyle(), random.Random(6)))
    page = document[0]
    try:
        text, band = ocr.read(page, None, ocr.REGION_FIRST)
    finally:
        page.close()
        document.close()
    assert band == 1
    assert ADDRESS in {c.address for c in page_candidates(text, 0, source=Source.OCR)}


def test_a_band_is_read_down_to_the_line_after_its_address() -> None:
    """The top band holds five lines; the address is on the second: the third is read too
    (an address broken at a line's end goes on there), the two below it are not."""
    lines = ["Grace Hopper", f"Berlin | {ADDRESS}", "Navy Yard", "Compilers", "Nanoseconds"]
    document = pdfium.PdfDocument(scan(fpdf_doc(lines), ScanStyle(), random.Random(7)))
    page = document[0]
    try:
        text, band = ocr.read(page, None, ocr.REGION_FIRST)
        whole_band, _ = ocr.read(page, None, ocr.Plan(by_line=False))
    finally:
        page.close()
        document.close()
    assert band == 0
    assert ADDRESS in {c.address for c in page_candidates(text, 0, source=Source.OCR)}
    assert "Navy Yard" in text
    assert "Compilers" not in text
    assert "Nanoseconds" not in text
    assert "Nanoseconds" in whole_band  # all five lines are in the band


def test_a_line_box_grows_by_its_margin_within_the_image() -> None:
    assert ocr._with_margin((10, 20, 110, 40), 1000, 500) == (6, 16, 108, 28)
    assert ocr._with_margin((2, 1, 998, 499), 1000, 500) == (0, 0, 1000, 500)


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
        pdf_engine="pypdf",
    )
    ex = Extractor.from_settings(settings)
    try:
        assert (ex.timeout_s, ex.max_pages, ex.max_page_chars) == (3, 7, 1234)
        assert (ex.ocr_max_pages, ex.ocr_timeout_s) == (1, 9)
        assert ex.engine is read_pdf_pypdf
    finally:
        ex.close()


async def test_a_job_counts_its_deferred_scans_and_records_nothing_for_them() -> None:
    """`process._extract_all` keeps Deferred scans out of the results (no outcome this try),
    names them for `process` (whose try then does not count) and counts them."""
    from types import SimpleNamespace

    from pdfqueue.domain.models import FileRef
    from pdfqueue.observability.metrics import OCR_DEFERRED
    from pdfqueue_worker.extractor import Deferred
    from pdfqueue_worker.parse import Extraction
    from pdfqueue_worker.tasks import process

    read = Extraction(pages=1, has_text=True)

    class Busy:
        async def extract_members(self, items: object, **_: object) -> AsyncIterator[object]:
            yield 0, read
            yield 1, Deferred()
            yield 2, Deferred()

    refs = [FileRef("b", i, f"{i}.pdf") for i in range(3)]
    member = Member(index=0, name="0.pdf", offset=0, compressed_size=1, size=1, method=0, crc=0)
    pdfs = dict.fromkeys(refs, (member, b""))
    deferred: set[FileRef] = set()
    before = OCR_DEFERRED._value.get()
    out = await process._extract_all(
        SimpleNamespace(extractor=Busy()),  # type: ignore[arg-type]
        pdfs,
        dict.fromkeys(refs, 0),
        until=asyncio.get_running_loop().time() + 60,
        together=True,
        deferred=deferred,
    )
    assert out == {refs[0]: read}
    assert deferred == set(refs[1:])
    assert OCR_DEFERRED._value.get() - before == 2


async def test_a_try_whose_scans_wait_for_a_turn_runs_again_when_one_may_be_free() -> None:
    """Not at once: each run reads the job's span again, only to find the turns taken."""
    from types import SimpleNamespace

    from pdfqueue_worker.tasks import attempt

    class Redis:
        async def set(self, *args: object, **kwargs: object) -> None:
            return None

    deps = SimpleNamespace(redis=Redis(), backoff_s=lambda job_try: 1.0)
    ctx = {"job_try": 1, "job_id": "process:b:0"}
    waiting = attempt.ScansWaiting("3 PDFs wait for an OCR turn", 30.0)
    assert (await attempt.retry_later(deps, ctx, waiting)).defer_score == 30_000  # type: ignore[arg-type]
    cut_short = TimeoutError("3 PDFs were not parsed in time")
    assert (await attempt.retry_later(deps, ctx, cut_short)).defer_score == 1_000  # type: ignore[arg-type]
