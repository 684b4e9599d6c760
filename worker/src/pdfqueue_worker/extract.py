"""Text extraction with PDFium in a pool of killable, capped processes: never on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import io
import logging
import multiprocessing
import os
import re
import resource
import signal
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from pebble import ProcessExpired, ProcessPool
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

from pdfqueue.domain.errors import FileRejected
from pdfqueue_worker import ocr
from pdfqueue_worker.candidates import Candidate, Source, page_candidates
from pdfqueue_worker.emails import DEFAULT_MAX_PAGE_CHARS
from pdfqueue_worker.payload import Packed, Uninflatable, inflate

if TYPE_CHECKING:
    from pdfqueue.domain.settings import Settings
    from pdfqueue_worker.archive import Member

PDF_MAGIC_WINDOW = 1024  # the PDF spec lets junk precede %PDF- within the first KiB
KEPT_ENVIRONMENT = (
    *("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TESSDATA_PREFIX"),
    "OMP_THREAD_LIMIT",  # set by the process itself (see `_prepare`)
)
"""All a parsing process keeps of the worker's environment: never a password, key or token."""
GROUP_BUDGET_S = 0.25
"""A group task (`read_members`) takes no new PDF after this long: a few dense pages each
take milliseconds, so a job's group of 32 is one task, and a slow group still returns often."""
OCR_FIRST_GUESS_S = 2.0
"""What an OCR pass is taken to cost until one has been timed (a 300 dpi page, one core)."""
OCR_AVERAGE_WEIGHT = 0.3
"""Weight of the latest OCR pass in the moving average of their durations."""
GROUP_TIMEOUT_S = 2.0
"""A group task still running after this is killed: one of its PDFs is slow or hostile. What
it had left is then read one PDF per task, each with the full `timeout_s`."""
MAX_LINKS_PER_PAGE = 256
"""Link annotations examined per page for a `mailto:` (a résumé has a handful)."""
MAX_URI_BYTES = 2048
"""Longest link URI read (a `mailto:` is far shorter)."""
_AT = re.compile("[@\ufe6b\uff20]")
"""@ and the two characters NFKC folds to it (the address scan normalizes with NFKC)."""
# PDFium does not return allocation failures: at the memory cap it aborts the process, and a
# SIGABRT is read as `too_large` (pebble replaces the process; nothing else is lost).
_LOCKED = (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY)
log = logging.getLogger(__name__)


class Unreadable(FileRejected):
    """This PDF cannot be read."""


@dataclass(frozen=True)
class Result:
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


Extraction = Result
"""What `Extractor` returns: the parsing process's result."""


@dataclass(frozen=True)
class Deferred:
    """A PDF not read this try: its OCR pass would have waited past the try's deadline
    behind the worker's other OCR passes. Not an outcome, and not the job's failure."""


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


def _prepare(max_bytes: int) -> None:
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
) -> Result:
    """Runs in a pool process: pages from `start_page` on, up to the first page with a
    candidate, which is page one for nearly every résumé (reading the rest would double the
    cost). PDFium's text page costs a third of pypdf's `extract_text` on dense pages."""
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        return Result(_refusal(exc.err_code))
    except MemoryError:
        return Result("too_large")
    try:
        return _read_pages(document, max_pages, start_page, max_page_chars, how)
    except MemoryError:
        return Result("too_large")
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return Result("unreadable")
    finally:
        document.close()


def _refusal(err_code: int | None) -> str:
    """Why PDFium would not open a document ("" when it opened one without pages)."""
    if err_code in _LOCKED:
        return "encrypted"
    return "" if err_code == pdfium_c.FPDF_ERR_SUCCESS else "unreadable"


def _read_pages(
    document: pdfium.PdfDocument, max_pages: int, start_page: int, max_page_chars: int, how: Ocr
) -> Result:
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
                    return Result("", (), pages, has_text, None, ocr_from=number)
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
            return Result("", tuple(found.values()), pages, has_text, number + 1, None, used)
    return Result("", tuple(found.values()), pages, has_text, None, None, used, needs_ocr)


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
    data: bytes,
    max_pages: int,
    start_page: int = 0,
    max_page_chars: int = DEFAULT_MAX_PAGE_CHARS,
    how: Ocr = NO_OCR,
) -> Result:
    """`read_pdf` with pypdf's `extract_text`, the parser before PDFium: kept to compare
    them (`bench/parse.py`, `bench/hostile.py`, tests) and as a fallback. Text layer only:
    no link annotations, no OCR (`how` is accepted and ignored)."""
    del how
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            return Result("encrypted")
        found: dict[str, Candidate] = {}
        has_text = False
        pages = len(reader.pages)
        last = min(pages, max_pages)
        for number in range(start_page, last):
            text = reader.pages[number].extract_text()
            has_text = has_text or bool(text.strip())
            for c in page_candidates(text, number, max_chars=max_page_chars):
                found.setdefault(c.address, c)
            if found and number + 1 < last:
                return Result("", tuple(found.values()), pages, has_text, number + 1)
    except (FileNotDecryptedError, DependencyError):
        return Result("encrypted")
    except (LimitReachedError, MemoryError):
        return Result("too_large")
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return Result("unreadable")
    return Result("", tuple(found.values()), pages, has_text)


def read_member(  # noqa: PLR0917 (a pool task: pebble passes its arguments by position)
    raw: bytes,
    packed: Packed,
    max_pages: int,
    start_page: int,
    max_page_chars: int,
    engine: Callable[..., Result],
    how: Ocr = TEXT_ONLY,
) -> Result:
    """Runs in a pool process: inflate one ZIP member under this process's memory cap,
    then read it. `raw` is the member's local header and compressed data."""
    try:
        data = inflate(raw, packed)
    except Uninflatable as exc:
        return Result(exc.reason)
    if b"%PDF-" not in data[:PDF_MAGIC_WINDOW]:
        return Result("not_a_pdf")
    return engine(data, max_pages, start_page, max_page_chars, how)


def read_members(
    items: list[tuple[bytes, Packed, int]],
    max_pages: int,
    max_page_chars: int,
    engine: Callable[..., Result],
    budget_s: float,
) -> list[Result]:
    """Runs in a pool process: `read_member`'s text pass for several members in one task,
    in order, taking no new member once `budget_s` has passed (at least one is read). The
    caller sends the rest again; a member that hangs is killed with the task."""
    out: list[Result] = []
    stop = time.monotonic() + budget_s
    for raw, packed, start in items:
        out.append(read_member(raw, packed, max_pages, start, max_page_chars, engine))
        if time.monotonic() > stop:
            break
    return out


def _ready() -> bool:
    """A pool task that does nothing: the pool starts all its processes for the first task."""
    return True


ENGINES: dict[str, Callable[..., Extraction]] = {"pdfium": read_pdf, "pypdf": read_pdf_pypdf}


def _settled(task: asyncio.Task[Extraction]) -> Extraction | Unreadable:
    """A finished read's result, or why its PDF is unreadable (any other error is raised)."""
    error = task.exception()
    if error is None:
        return task.result()
    if isinstance(error, Unreadable):
        return error
    raise error


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
        ocr_max_pages: int = 0,
        ocr_timeout_s: float = 30.0,
        tessdata: str | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_pages = max_pages
        self.max_page_chars = max_page_chars
        self.engine = ENGINES[engine]
        self.ocr_max_pages = ocr_max_pages
        self.ocr_timeout_s = ocr_timeout_s
        self.tessdata = tessdata
        self.processes = processes
        self._ocr_turns = asyncio.Semaphore(processes)
        """OCR passes running at once: one per parsing process (see `extract_members`)."""
        self._ocr_load = 0
        """OCR passes running or waiting for their turn."""
        self._ocr_seconds = OCR_FIRST_GUESS_S
        """How long an OCR pass has been taking (a moving average)."""
        self.pool = ProcessPool(
            max_workers=processes,  # from_settings resolves "one per CPU" (parsing_processes)
            max_tasks=tasks_per_process,
            initializer=_prepare,
            initargs=(memory_bytes,),
            # forkserver: forking the event-loop process, with its threads, is unsafe.
            context=_forkserver(),
        )

    @property
    def ocr_load(self) -> int:
        """OCR passes running or waiting for their turn."""
        return self._ocr_load

    def ocr_wait_s(self) -> float:
        """About how long a new OCR pass would wait for its turn, going by recent passes."""
        return self._ocr_load // self.processes * self._ocr_seconds

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> Extractor:
        """The worker's extractor for these settings (the one place that maps them);
        `overrides` are for benchmarks and tests (`processes=1`, `engine="pypdf"`)."""
        options: dict[str, Any] = {
            "processes": settings.parsing_processes,
            "timeout_s": settings.extract_timeout_s,
            "max_pages": settings.extract_max_pages,
            "memory_bytes": settings.extract_memory_bytes,
            "tasks_per_process": settings.extract_tasks_per_process,
            "max_page_chars": settings.extract_max_page_chars,
            "ocr_max_pages": settings.ocr_max_pages,
            "ocr_timeout_s": settings.ocr_timeout_s,
        }
        return cls(**(options | overrides))

    async def start(self) -> None:
        """Start the parsing processes now (pebble starts them for the first task), so that a
        worker's first job does not wait for the processes' start (up to a second each on a
        busy node)."""
        await self._schedule(self.timeout_s, _ready)

    async def extract(self, data: bytes, start_page: int = 0) -> Extraction:
        """Read up to the first page with a candidate; `start_page` continues from there.
        A page without a usable text layer is read by OCR, under its own time limit."""

        def args(page: int, how: Ocr) -> tuple[Any, ...]:
            return data, self.max_pages, page, self.max_page_chars, how

        return await self._read(self.engine, args, start_page)

    async def extract_members(
        self,
        items: Sequence[tuple[bytes, Member, int]],
        *,
        together: bool = True,
        until: float | None = None,
    ) -> AsyncGenerator[tuple[int, Extraction | Unreadable | Deferred]]:
        """`extract` for ZIP members still compressed, each (raw: its local header and data,
        member, start page), yielding (position, result) as each is done. The parsing
        process inflates it, so inflated bytes never reach the worker itself.

        `together`: their text pass runs as one pool task per GROUP_BUDGET_S of parsing
        instead of one per PDF, which shares a task's pickling, pipe hops and bookkeeping
        among a job's PDFs. A group still running after GROUP_TIMEOUT_S is killed and what
        it had left is read one PDF per task with the full limit, so only the PDF at fault
        fails.

        The PDFs with a page to OCR come last, one at a time, each in its turn among the
        worker's OCR passes (one per parsing process, first come first served). OCR takes
        seconds a page: passed to the pool all at once, the first job's scans took every
        process and the other jobs' tries ran out waiting, making no progress. Taking turns,
        every job doing OCR gets a pass in each round. `until` (the loop's clock): when
        every turn is taken and its turn would not end by then, going by how long passes
        take, a PDF is not queued: it and the job's other scans come back `Deferred`, for
        a later try that the job does not count (`tasks.process`).
        """
        to_ocr: list[tuple[int, Result]] = []
        async with contextlib.aclosing(self._text_passes(items, together=together)) as firsts:
            async for i, first in firsts:
                if isinstance(first, Result) and first.ocr_from is not None:
                    to_ocr.append((i, first))
                else:
                    yield i, first
        for n, (i, first) in enumerate(to_ocr):
            args = self._member_args(*items[i][:2])
            try:
                more = await self._after(first, read_member, args, until)
            except Unreadable as exc:
                yield i, exc
                continue
            if more is None:  # no turn before the deadline: this and the rest wait
                for j, _ in to_ocr[n:]:
                    yield j, Deferred()
                return
            yield i, more

    async def _text_passes(
        self, items: Sequence[tuple[bytes, Member, int]], *, together: bool
    ) -> AsyncGenerator[tuple[int, Extraction | Unreadable]]:
        """Each member's text pass: up to its first page with a candidate, or to a page
        without a usable text layer (`ocr_from`)."""
        todo = list(range(len(items))) if together and len(items) > 1 else []
        alone = [] if todo else list(range(len(items)))
        passes: dict[asyncio.Task[Extraction], int] = {}
        try:
            while todo:
                try:
                    firsts = await self._group([items[i] for i in todo])
                except Unreadable as exc:
                    log.warning(
                        "a parsing group failed (%s): reading %d PDFs one by one",
                        exc.reason,
                        len(todo),
                    )
                    alone, todo = todo, []
                    break
                for i, first in zip(todo, firsts, strict=False):
                    yield i, (Unreadable(first.reason) if first.reason else first)
                todo = todo[len(firsts) :]
            for i in alone:
                raw, member, start = items[i]
                args = self._member_args(raw, member)(start, TEXT_ONLY)
                passes[asyncio.create_task(self._run(self.timeout_s, read_member, *args))] = i
            while passes:
                done, _ = await asyncio.wait(passes, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    yield passes.pop(task), _settled(task)
        finally:
            for task in passes:
                task.cancel()  # pebble kills a process parsing a cancelled task

    async def _group(self, items: Sequence[tuple[bytes, Member, int]]) -> list[Result]:
        packed = [(raw, Packed.of(member), start) for raw, member, start in items]
        timeout_s = min(GROUP_TIMEOUT_S, self.timeout_s)
        fixed = (self.max_pages, self.max_page_chars, self.engine, GROUP_BUDGET_S)
        firsts: list[Result] = await self._schedule(timeout_s, read_members, packed, *fixed)
        return firsts

    def _member_args(self, raw: bytes, member: Member) -> Callable[[int, Ocr], tuple[Any, ...]]:
        packed = Packed.of(member)

        def args(page: int, how: Ocr) -> tuple[Any, ...]:
            return raw, packed, self.max_pages, page, self.max_page_chars, self.engine, how

        return args

    async def _read(
        self, fn: Callable[..., Result], args: Callable[[int, Ocr], tuple[Any, ...]], start: int
    ) -> Extraction:
        """The text pass, then `_after` it."""
        first = await self._run(self.timeout_s, fn, *args(start, TEXT_ONLY))
        more = await self._after(first, fn, args)
        assert more is not None  # no deadline was given
        return more

    async def _after(
        self,
        first: Result,
        fn: Callable[..., Result],
        args: Callable[[int, Ocr], tuple[Any, ...]],
        until: float | None = None,
    ) -> Extraction | None:
        """From a page without a usable text layer on, a second pass that may OCR, with its
        own time limit (Tesseract takes seconds where PDFium takes ms), in its turn among
        the OCR passes (`_ocr_pass`). None: it did not start before `until`."""
        if first.ocr_from is None:
            return first
        if self.ocr_max_pages:
            how = Ocr(handover=False, budget=self.ocr_max_pages, tessdata=self.tessdata)
            more = await self._ocr_pass(fn, args(first.ocr_from, how), until)
        else:  # no OCR: the rest of the text layer, in milliseconds
            more = await self._run(self.timeout_s, fn, *args(first.ocr_from, NO_OCR))
        if more is None:
            return None
        return replace(more, has_text=more.has_text or first.has_text)

    async def _ocr_pass(
        self, fn: Callable[..., Result], args: tuple[Any, ...], until: float | None
    ) -> Extraction | None:
        """`fn(*args)` in its turn among the worker's OCR passes. None: every turn is taken
        and, going by how long passes take, its turn would not end by `until`, so it did not
        queue (with a free turn it always starts, so OCR never stalls)."""
        loop = asyncio.get_running_loop()
        busy = self._ocr_load >= self.processes
        if (
            busy
            and until is not None
            and loop.time() + self.ocr_wait_s() + self._ocr_seconds > until
        ):
            return None
        self._ocr_load += 1
        try:
            async with self._ocr_turns:
                started = loop.time()
                try:
                    more = await self._run(self.ocr_timeout_s, fn, *args)
                except Unreadable:  # timed out or crashed: that took its time too
                    self._timed(loop.time() - started)
                    raise
                self._timed(loop.time() - started)  # (a cancelled pass says nothing)
                return more
        finally:
            self._ocr_load -= 1

    def _timed(self, seconds: float) -> None:
        """Fold one OCR pass's duration into the moving average."""
        self._ocr_seconds += (seconds - self._ocr_seconds) * OCR_AVERAGE_WEIGHT

    async def _run(self, timeout_s: float, fn: Callable[..., Result], *args: Any) -> Extraction:
        result: Result = await self._schedule(timeout_s, fn, *args)
        if result.reason:
            raise Unreadable(result.reason)
        return result

    async def _schedule(self, timeout_s: float, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` in a parsing process, killed after `timeout_s` of running."""
        future = self.pool.schedule(fn, args=args, timeout=timeout_s)
        try:
            return await asyncio.wrap_future(future)
        except FutureTimeout as exc:
            raise Unreadable("timeout", f"parsing took over {timeout_s:g}s") from exc
        except ProcessExpired as exc:
            reason = death_reason(exc.exitcode)
            raise Unreadable(reason, f"the parser process died ({exc.exitcode})") from exc
        except asyncio.CancelledError:
            future.cancel()  # pebble kills the process running a cancelled task
            raise

    def close(self) -> None:
        self.pool.stop()
        self.pool.join(timeout=5)
