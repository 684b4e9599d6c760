"""The worker's side of parsing: a pool of killable, capped processes, with turns for OCR.

Nothing here reads a PDF: it schedules `pdfqueue_worker.parse` in the pool, groups a job's
PDFs into few tasks, kills what runs past its limit and gives OCR passes their turns. PDF
parsing never runs on the event loop, nor in the worker's own process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import signal
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pebble import ProcessExpired, ProcessPool

from pdfqueue.domain.errors import FileRejected
from pdfqueue_worker import parse
from pdfqueue_worker.emails import DEFAULT_MAX_PAGE_CHARS
from pdfqueue_worker.parse import (
    ENGINES,
    NO_OCR,
    TEXT_ONLY,
    Extraction,
    Ocr,
    read_member,
    read_members,
)
from pdfqueue_worker.payload import Packed

if TYPE_CHECKING:
    from pdfqueue.domain.settings import Settings
    from pdfqueue_worker.payload import Member

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
log = logging.getLogger(__name__)


class Unreadable(FileRejected):
    """This PDF cannot be read."""


@dataclass(frozen=True)
class Deferred:
    """A PDF not read this try: its OCR pass would have waited past the try's deadline
    behind the worker's other OCR passes. Not an outcome, and not the job's failure."""


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
    """A forkserver that has imported the parsers once, so a new parsing process starts warm
    (with pebble, whose loop runs its tasks)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([parse.__name__, "pebble"])
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
            initializer=parse.prepare,
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
        `overrides` are for benchmarks and tests (`processes=1`, `ocr_max_pages=0`)."""
        options: dict[str, Any] = {
            "processes": settings.parsing_processes,
            "timeout_s": settings.extract_timeout_s,
            "max_pages": settings.extract_max_pages,
            "memory_bytes": settings.extract_memory_bytes,
            "tasks_per_process": settings.extract_tasks_per_process,
            "max_page_chars": settings.extract_max_page_chars,
            "engine": settings.pdf_engine,
            "ocr_max_pages": settings.ocr_max_pages,
            "ocr_timeout_s": settings.ocr_timeout_s,
        }
        return cls(**(options | overrides))

    async def start(self) -> None:
        """Start the parsing processes now (pebble starts them for the first task), so that a
        worker's first job does not wait for the processes' start (up to a second each on a
        busy node)."""
        await self._schedule(self.timeout_s, parse.ready)

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
        to_ocr: list[tuple[int, Extraction]] = []
        async with contextlib.aclosing(self._text_passes(items, together=together)) as firsts:
            async for i, first in firsts:
                if isinstance(first, Extraction) and first.ocr_from is not None:
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

    async def _group(self, items: Sequence[tuple[bytes, Member, int]]) -> list[Extraction]:
        packed = [(raw, Packed.of(member), start) for raw, member, start in items]
        timeout_s = min(GROUP_TIMEOUT_S, self.timeout_s)
        fixed = (self.max_pages, self.max_page_chars, self.engine, GROUP_BUDGET_S)
        firsts: list[Extraction] = await self._schedule(timeout_s, read_members, packed, *fixed)
        return firsts

    def _member_args(self, raw: bytes, member: Member) -> Callable[[int, Ocr], tuple[Any, ...]]:
        packed = Packed.of(member)

        def args(page: int, how: Ocr) -> tuple[Any, ...]:
            return raw, packed, self.max_pages, page, self.max_page_chars, self.engine, how

        return args

    async def _read(
        self, fn: Callable[..., Extraction], args: Callable[[int, Ocr], tuple[Any, ...]], start: int
    ) -> Extraction:
        """The text pass, then `_after` it."""
        first = await self._run(self.timeout_s, fn, *args(start, TEXT_ONLY))
        more = await self._after(first, fn, args)
        assert more is not None  # no deadline was given
        return more

    async def _after(
        self,
        first: Extraction,
        fn: Callable[..., Extraction],
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
        self, fn: Callable[..., Extraction], args: tuple[Any, ...], until: float | None
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

    async def _run(self, timeout_s: float, fn: Callable[..., Extraction], *args: Any) -> Extraction:
        result: Extraction = await self._schedule(timeout_s, fn, *args)
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
