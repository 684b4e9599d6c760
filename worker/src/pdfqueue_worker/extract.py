"""Text extraction with PDFium in a pool of killable, capped processes: never on the event loop."""

from __future__ import annotations

import asyncio
import io
import logging
import multiprocessing
import os
import re
import resource
import signal
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pebble import ProcessExpired, ProcessPool
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

from pdfqueue.domain.errors import PermanentError
from pdfqueue_worker.emails import DEFAULT_MAX_PAGE_CHARS, find_emails
from pdfqueue_worker.payload import Packed, Uninflatable, inflate

if TYPE_CHECKING:
    from pdfqueue_worker.archive import Member

PDF_MAGIC_WINDOW = 1024  # the PDF spec lets junk precede %PDF- within the first KiB
KEPT_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
"""All a parsing process keeps of the worker's environment: never a password, key or token."""
_AT = re.compile("[@\ufe6b\uff20]")
"""@ and the two characters NFKC folds to it (the address scan normalizes with NFKC)."""
# PDFium does not return allocation failures: at the memory cap it aborts the process, and a
# SIGABRT is read as `too_large` (pebble replaces the process; nothing else is lost).
_LOCKED = (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY)


class Unreadable(PermanentError):
    """This PDF cannot be read; `reason` is the per-file reason in the report."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


@dataclass(frozen=True)
class Extraction:
    emails: list[str]
    """Candidate addresses in reading order, from the pages read."""
    pages: int
    has_text: bool
    next_page: int | None = None
    """Where reading stopped early, at the end of the first page with an address; None when
    every page (up to the limit) was read."""
    refusal: str = ""
    """Why the file cannot be read (its per-file reason); empty when it could."""


def refused(reason: str) -> Extraction:
    """What a parsing process answers for a file it cannot read."""
    return Extraction([], 0, False, refusal=reason)


def _prepare(max_bytes: int) -> None:
    """Pool initializer: a decompression bomb hits MemoryError here, not the node's OOM
    killer, and code running on hostile input finds no secret in its environment."""
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    kept = {k: v for k, v in os.environ.items() if k in KEPT_ENVIRONMENT}
    os.environ.clear()
    os.environ.update(kept)
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def read_pdf(
    data: bytes, max_pages: int, start_page: int = 0, max_page_chars: int = DEFAULT_MAX_PAGE_CHARS
) -> Extraction:
    """Runs in a pool process: pages from `start_page` on, up to the first page with an
    address, which is page one for nearly every résumé (reading the rest would double the
    cost). PDFium's text page costs a third of pypdf's `extract_text` on dense pages."""
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        return refused(_refusal(exc.err_code))
    except MemoryError:
        return refused("too_large")
    try:
        return _read_pages(document, max_pages, start_page, max_page_chars)
    except MemoryError:
        return refused("too_large")
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return refused("unreadable")
    finally:
        document.close()


def _refusal(err_code: int | None) -> str:
    """Why PDFium would not open a document ("" when it opened one without pages)."""
    if err_code in _LOCKED:
        return "encrypted"
    return "" if err_code == pdfium_c.FPDF_ERR_SUCCESS else "unreadable"


def _read_pages(
    document: pdfium.PdfDocument, max_pages: int, start_page: int, max_page_chars: int
) -> Extraction:
    emails: list[str] = []
    has_text = False
    pages = len(document)
    last = min(pages, max_pages)
    for number in range(start_page, last):
        page = document[number]
        try:
            textpage = page.get_textpage()
            text = textpage.get_text_range()
            textpage.close()
        finally:
            page.close()
        has_text = has_text or bool(text.strip())
        found = find_emails(address_lines(text[:max_page_chars]), max_page_chars)
        emails.extend(e for e in found if e not in emails)
        if emails and number + 1 < last:
            return Extraction(emails, pages, has_text, number + 1)
    return Extraction(emails, pages, has_text)


def address_lines(text: str) -> str:
    """Only the lines of `text` with an @ (or a look-alike): no address spans a line, and
    scanning every line of a dense page cost a fifth of reading it."""
    lines = []
    end = 0
    for at in _AT.finditer(text):
        if at.start() < end:
            continue  # a second @ on a line already taken
        start = text.rfind("\n", 0, at.start()) + 1
        end = text.find("\n", at.start())
        end = len(text) if end < 0 else end
        lines.append(text[start:end])
    return "\n".join(lines)


def read_pdf_pypdf(
    data: bytes, max_pages: int, start_page: int = 0, max_page_chars: int = DEFAULT_MAX_PAGE_CHARS
) -> Extraction:
    """`read_pdf` with pypdf's `extract_text`, the parser before PDFium: kept to compare
    them (`bench/parse.py`, `bench/hostile.py`, tests) and as a fallback."""
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            return refused("encrypted")
        emails: list[str] = []
        has_text = False
        pages = len(reader.pages)
        last = min(pages, max_pages)
        for number in range(start_page, last):
            text = reader.pages[number].extract_text()
            has_text = has_text or bool(text.strip())
            emails.extend(e for e in find_emails(text, max_page_chars) if e not in emails)
            if emails and number + 1 < last:
                return Extraction(emails, pages, has_text, number + 1)
    except (FileNotDecryptedError, DependencyError):
        return refused("encrypted")
    except (LimitReachedError, MemoryError):
        return refused("too_large")
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return refused("unreadable")
    return Extraction(emails, pages, has_text)


def read_member(  # noqa: PLR0917 (a pool task: pebble passes its arguments by position)
    raw: bytes,
    packed: Packed,
    max_pages: int,
    start_page: int,
    max_page_chars: int,
    engine: Callable[..., Extraction],
) -> Extraction:
    """Runs in a pool process: inflate one ZIP member under this process's memory cap,
    then read it. `raw` is the member's local header and compressed data."""
    try:
        data = inflate(raw, packed)
    except Uninflatable as exc:
        return refused(exc.reason)
    if b"%PDF-" not in data[:PDF_MAGIC_WINDOW]:
        return refused("not_a_pdf")
    return engine(data, max_pages, start_page, max_page_chars)


ENGINES: dict[str, Callable[..., Extraction]] = {"pdfium": read_pdf, "pypdf": read_pdf_pypdf}


def death_reason(exitcode: int | None) -> str:
    """The per-file reason when the parsing process died on a file."""
    return "too_large" if exitcode == -signal.SIGABRT else "parser_crashed"


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """A forkserver that has imported the parsers once, so a new parsing process starts warm."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


class Extractor:
    """Owns the process pool; a PDF that hangs the parser is killed at the time limit."""

    def __init__(
        self,
        *,
        processes: int,
        timeout_s: float,
        max_pages: int,
        memory_bytes: int,
        tasks_per_process: int,
        max_page_chars: int = DEFAULT_MAX_PAGE_CHARS,
        engine: str = "pdfium",
    ) -> None:
        self.timeout_s = timeout_s
        self.max_pages = max_pages
        self.max_page_chars = max_page_chars
        self.engine = ENGINES[engine]
        self.pool = ProcessPool(
            max_workers=processes or os.cpu_count() or 1,
            max_tasks=tasks_per_process,
            initializer=_prepare,
            initargs=(memory_bytes,),
            # forkserver: forking the event-loop process, with its threads, is unsafe.
            context=_forkserver(),
        )

    async def extract(self, data: bytes, start_page: int = 0) -> Extraction:
        """Read up to the first page with an address; `start_page` continues from there."""
        return await self._run(self.engine, data, self.max_pages, start_page, self.max_page_chars)

    async def extract_member(self, raw: bytes, member: Member, start_page: int = 0) -> Extraction:
        """`extract` for a ZIP member still compressed (`raw`: its local header and data):
        the parsing process inflates it, so inflated bytes never reach the worker itself."""
        packed = Packed.of(member)
        return await self._run(
            read_member, raw, packed, self.max_pages, start_page, self.max_page_chars, self.engine
        )

    async def _run(self, fn: Callable[..., Extraction], *args: Any) -> Extraction:
        future = self.pool.schedule(fn, args=args, timeout=self.timeout_s)
        try:
            found: Extraction = await asyncio.wrap_future(future)
        except FutureTimeout as exc:
            raise Unreadable("timeout", f"parsing took over {self.timeout_s:g}s") from exc
        except ProcessExpired as exc:
            reason = death_reason(exc.exitcode)
            raise Unreadable(reason, f"the parser process died ({exc.exitcode})") from exc
        except asyncio.CancelledError:
            future.cancel()  # pebble kills the process running a cancelled task
            raise
        if found.refusal:
            raise Unreadable(found.refusal)
        return found

    def close(self) -> None:
        self.pool.stop()
        self.pool.join(timeout=5)
