"""What runs in a parsing process: a PDF's text, links and OCR read into candidate addresses.

The worker never calls these itself: `pdfqueue_worker.extractor` sends them to its pool of
killable, memory-capped processes, and this module is all those processes import to start."""

from __future__ import annotations

import ctypes
import io
import logging
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pypdf import PageObject, PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

from pdfqueue_worker import ocr
from pdfqueue_worker.candidates import Candidate, Source, page_candidates
from pdfqueue_worker.emails import DEFAULT_MAX_PAGE_CHARS
from pdfqueue_worker.payload import Packed, Uninflatable, inflate

PDF_MAGIC_WINDOW = 1024  # the PDF spec lets junk precede %PDF- within the first KiB
KEPT_ENVIRONMENT = (
    *("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TESSDATA_PREFIX"),
    "OMP_THREAD_LIMIT",  # set by the process itself (see `prepare`)
)
"""All a parsing process keeps of the worker's environment: never a password, key or token."""
MAX_LINKS_PER_PAGE = 256
"""Link annotations examined per page for a `mailto:` (a résumé has a handful)."""
MAX_URI_BYTES = 2048
"""Longest link URI read (a `mailto:` is far shorter)."""
# PDFium does not return allocation failures: at the memory cap it aborts the process, and a
# SIGABRT is read as `too_large` (pebble replaces the process; nothing else is lost).
_LOCKED = (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY)


@dataclass(frozen=True)
class Extraction:
    """What a parsing process read of one PDF (pickled back to the worker)."""

    reason: str = ""
    """Why the file cannot be read ("" when it was)."""
    candidates: tuple[Candidate, ...] = ()
    """Candidate addresses in reading order, from the pages read."""
    pages: int = 0
    has_text: bool = False
    next_page: int | None = None
    """Where reading stopped early, at the end of the first page with a candidate; None when
    every page (up to the limit) was read."""
    ocr_from: int | None = None
    """The first page without a usable text layer, where a read without OCR handed over."""
    ocr_pages: int = 0
    """Pages read by OCR."""
    needs_ocr: bool = False
    """A page had no usable text layer and was not read by OCR (none installed, or over
    the OCR page limit)."""

    @property
    def emails(self) -> list[str]:
        """The candidates' addresses, in reading order."""
        return [c.address for c in self.candidates]


@dataclass(frozen=True)
class Ocr:
    """How a read treats pages without a usable text layer."""

    handover: bool = True
    """Stop at the first such page (before any candidate) so OCR runs under its own limit."""
    budget: int = 0
    """Pages this read may OCR."""
    tessdata: str | None = None
    """Tesseract's language data folder (None: TESSDATA_PREFIX or Debian's)."""


TEXT_ONLY = Ocr()
NO_OCR = Ocr(handover=False)


def prepare(max_bytes: int) -> None:
    """Pool initializer: a decompression bomb hits MemoryError here, not the node's OOM
    killer, and code running on hostile input finds no secret in its environment."""
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    kept = {k: v for k, v in os.environ.items() if k in KEPT_ENVIRONMENT}
    os.environ.clear()
    os.environ.update(kept)
    # Tesseract's OpenMP threads would only fight the other parsing processes for the cores
    # (and each reserves address space under the cap): one process, one thread.
    os.environ["OMP_THREAD_LIMIT"] = "1"
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def read_pdf(
    data: bytes,
    max_pages: int,
    start_page: int = 0,
    max_page_chars: int = DEFAULT_MAX_PAGE_CHARS,
    how: Ocr = TEXT_ONLY,
) -> Extraction:
    """Runs in a pool process: pages from `start_page` on, up to the first page with a
    candidate, which is page one for nearly every résumé (reading the rest would double the
    cost). PDFium's text page costs a third of pypdf's `extract_text` on dense pages."""
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        return Extraction(_refusal(exc.err_code))
    except MemoryError:
        return Extraction("too_large")
    try:
        return _read_pages(document, max_pages, start_page, max_page_chars, how)
    except MemoryError:
        return Extraction("too_large")
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return Extraction("unreadable")
    finally:
        document.close()


def _refusal(err_code: int | None) -> str:
    """Why PDFium would not open a document ("" when it opened one without pages)."""
    if err_code in _LOCKED:
        return "encrypted"
    return "" if err_code == pdfium_c.FPDF_ERR_SUCCESS else "unreadable"


def _read_pages(
    document: pdfium.PdfDocument, max_pages: int, start_page: int, max_page_chars: int, how: Ocr
) -> Extraction:
    found: dict[str, Candidate] = {}
    has_text = needs_ocr = False
    budget, used = how.budget, 0
    pages = len(document)
    last = min(pages, max_pages)
    for number in range(start_page, last):
        page = document[number]
        try:
            text, uris = _page_text(document, page)
            source = Source.TEXT
            if ocr.unusable(text) and ocr.drawn(page):
                if how.handover and not found:
                    return Extraction("", (), pages, has_text, None, ocr_from=number)
                if budget > 0:
                    text, source = _ocr(page, text, how.tessdata)
                    budget = budget - 1 if source is Source.OCR else 0  # none: no more tries
                    used += source is Source.OCR
                needs_ocr = needs_ocr or source is Source.TEXT
        finally:
            page.close()
        has_text = has_text or bool(text.strip())
        for c in page_candidates(text, number, source=source, uris=uris, max_chars=max_page_chars):
            found.setdefault(c.address, c)
        if found and number + 1 < last:
            return Extraction("", tuple(found.values()), pages, has_text, number + 1, None, used)
    return Extraction("", tuple(found.values()), pages, has_text, None, None, used, needs_ocr)


def _ocr(page: pdfium.PdfPage, text: str, tessdata: str | None) -> tuple[str, Source]:
    """The page read by OCR, if this process can; else its text layer as it is."""
    try:
        return ocr.read_page(page, tessdata), Source.OCR
    except ocr.OcrUnavailable:
        return text, Source.TEXT


def _page_text(document: pdfium.PdfDocument, page: pdfium.PdfPage) -> tuple[str, tuple[str, ...]]:
    """The page's text layer and the URIs of its link annotations."""
    textpage = page.get_textpage()
    try:
        text = textpage.get_text_range()
    finally:
        textpage.close()
    return text, _link_uris(document, page)


def _link_uris(document: pdfium.PdfDocument, page: pdfium.PdfPage) -> tuple[str, ...]:
    """URIs of the page's link annotations (`/URI` actions), at most MAX_LINKS_PER_PAGE."""
    uris: list[str] = []
    position = ctypes.c_int(0)
    link = pdfium_c.FPDF_LINK()
    for _ in range(MAX_LINKS_PER_PAGE):
        if not pdfium_c.FPDFLink_Enumerate(page.raw, ctypes.byref(position), ctypes.byref(link)):
            break
        action = pdfium_c.FPDFLink_GetAction(link)
        if not action or pdfium_c.FPDFAction_GetType(action) != pdfium_c.PDFACTION_URI:
            continue
        size = pdfium_c.FPDFAction_GetURIPath(document.raw, action, None, 0)
        if 0 < size <= MAX_URI_BYTES:
            buffer = ctypes.create_string_buffer(size)
            pdfium_c.FPDFAction_GetURIPath(document.raw, action, buffer, size)
            uris.append(buffer.value.decode("latin-1"))
    return tuple(uris)


def read_pdf_pypdf(
    data: bytes,
    max_pages: int,
    start_page: int = 0,
    max_page_chars: int = DEFAULT_MAX_PAGE_CHARS,
    how: Ocr = NO_OCR,
) -> Extraction:
    """`read_pdf` with pypdf's `extract_text` (`PDFQUEUE_PDF_ENGINE=pypdf`): pure Python, so
    no C++ runs on the hostile input. Text layer only: no link annotations and no OCR (`how`
    is accepted and ignored); a page drawn without a usable text layer is `needs_ocr`."""
    del how
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            return Extraction("encrypted")
        found: dict[str, Candidate] = {}
        has_text = needs_ocr = False
        pages = len(reader.pages)
        last = min(pages, max_pages)
        for number in range(start_page, last):
            page = reader.pages[number]
            text = page.extract_text()
            has_text = has_text or bool(text.strip())
            needs_ocr = needs_ocr or (ocr.unusable(text) and _drawn(page))
            for c in page_candidates(text, number, max_chars=max_page_chars):
                found.setdefault(c.address, c)
            if found and number + 1 < last:
                return Extraction("", tuple(found.values()), pages, has_text, number + 1)
    except (FileNotDecryptedError, DependencyError):
        return Extraction("encrypted")
    except (LimitReachedError, MemoryError):
        return Extraction("too_large")
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return Extraction("unreadable")
    return Extraction("", tuple(found.values()), pages, has_text, needs_ocr=needs_ocr)


def _drawn(page: PageObject) -> bool:
    """Whether the page draws anything (pypdf's view of `ocr.drawn`): a non-empty content
    stream."""
    contents = page.get_contents()
    return contents is not None and bool(contents.get_data().strip())


def read_member(  # noqa: PLR0917 (a pool task: pebble passes its arguments by position)
    raw: bytes,
    packed: Packed,
    max_pages: int,
    start_page: int,
    max_page_chars: int,
    engine: Callable[..., Extraction],
    how: Ocr = TEXT_ONLY,
) -> Extraction:
    """Runs in a pool process: inflate one ZIP member under this process's memory cap,
    then read it. `raw` is the member's local header and compressed data."""
    try:
        data = inflate(raw, packed)
    except Uninflatable as exc:
        return Extraction(exc.reason)
    if b"%PDF-" not in data[:PDF_MAGIC_WINDOW]:
        return Extraction("not_a_pdf")
    return engine(data, max_pages, start_page, max_page_chars, how)


def read_members(
    items: list[tuple[bytes, Packed, int]],
    max_pages: int,
    max_page_chars: int,
    engine: Callable[..., Extraction],
    budget_s: float,
) -> list[Extraction]:
    """Runs in a pool process: `read_member`'s text pass for several members in one task,
    in order, taking no new member once `budget_s` has passed (at least one is read). The
    caller sends the rest again; a member that hangs is killed with the task."""
    out: list[Extraction] = []
    stop = time.monotonic() + budget_s
    for raw, packed, start in items:
        out.append(read_member(raw, packed, max_pages, start, max_page_chars, engine))
        if time.monotonic() > stop:
            break
    return out


def ready() -> bool:
    """A pool task that does nothing: the pool starts all its processes for the first task."""
    return True


ENGINES: dict[str, Callable[..., Extraction]] = {"pdfium": read_pdf, "pypdf": read_pdf_pypdf}
"""The parsers by their `PDFQUEUE_PDF_ENGINE` names."""
