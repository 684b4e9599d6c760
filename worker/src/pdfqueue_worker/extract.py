"""Text extraction with pypdf in a pool of killable processes: never on the event loop."""

from __future__ import annotations

import asyncio
import io
import logging
import multiprocessing
import os
import resource
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from pebble import ProcessExpired, ProcessPool
from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, LimitReachedError

from pdfqueue_worker.emails import DEFAULT_MAX_PAGE_CHARS, find_emails


class Unreadable(Exception):
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


def _limit_memory(max_bytes: int) -> None:
    """Pool initializer: a decompression bomb hits MemoryError here, not the node's OOM killer."""
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def read_pdf(
    data: bytes, max_pages: int, start_page: int = 0, max_page_chars: int = DEFAULT_MAX_PAGE_CHARS
) -> tuple[str, list[str], int, bool, int | None]:
    """Runs in a pool process: pages from `start_page` on, up to the first page with an
    address, which is page one for nearly every résumé (reading the rest would double the
    cost). Returns (error reason or "", emails, pages, has_text, next page or None)."""
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            return "encrypted", [], 0, False, None
        emails: list[str] = []
        has_text = False
        pages = len(reader.pages)
        last = min(pages, max_pages)
        for number in range(start_page, last):
            text = reader.pages[number].extract_text()
            has_text = has_text or bool(text.strip())
            emails.extend(e for e in find_emails(text, max_page_chars) if e not in emails)
            if emails and number + 1 < last:
                return "", emails, pages, has_text, number + 1
    except (FileNotDecryptedError, DependencyError):
        return "encrypted", [], 0, False, None
    except (LimitReachedError, MemoryError):
        return "too_large", [], 0, False, None
    except Exception:  # any parser failure on hostile input: this file is unreadable
        return "unreadable", [], 0, False, None
    return "", emails, pages, has_text, None


def _forkserver() -> multiprocessing.context.ForkServerContext:
    """A forkserver that has imported pypdf once, so a new parsing process starts warm."""
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
    ) -> None:
        self.timeout_s = timeout_s
        self.max_pages = max_pages
        self.max_page_chars = max_page_chars
        self.pool = ProcessPool(
            max_workers=processes or os.cpu_count() or 1,
            max_tasks=tasks_per_process,
            initializer=_limit_memory,
            initargs=(memory_bytes,),
            # forkserver: forking the event-loop process, with its threads, is unsafe.
            context=_forkserver(),
        )

    async def extract(self, data: bytes, start_page: int = 0) -> Extraction:
        """Read up to the first page with an address; `start_page` continues from there."""
        future = self.pool.schedule(
            read_pdf,
            args=(data, self.max_pages, start_page, self.max_page_chars),
            timeout=self.timeout_s,
        )
        try:
            reason, emails, pages, has_text, next_page = await asyncio.wrap_future(future)
        except FutureTimeout as exc:
            raise Unreadable("timeout", f"parsing took over {self.timeout_s:g}s") from exc
        except ProcessExpired as exc:
            raise Unreadable("parser_crashed", f"the parser process died ({exc.exitcode})") from exc
        except asyncio.CancelledError:
            future.cancel()  # pebble kills the process running a cancelled task
            raise
        if reason:
            raise Unreadable(reason)
        return Extraction(emails, pages, has_text, next_page)

    def close(self) -> None:
        self.pool.stop()
        self.pool.join(timeout=5)
