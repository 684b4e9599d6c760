"""Reading a PDF for addresses: the parsing processes, OCR, placeholder domains."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from pdfqueue.domain.placeholders import PLACEHOLDER_DOMAINS
from pdfqueue.domain.settings.values import entries


class ExtractionSettings(BaseModel):
    """Extraction: the parsing processes, OCR, addresses never linked.

    How a PDF is read for addresses, in bounded processes of their own.
    """

    extract_processes: int = Field(default=0, ge=0)
    """Processes parsing PDFs per worker; 0 means one per CPU (`parsing_processes`)."""
    extract_timeout_s: float = 10.0
    """Hard limit for reading one PDF; the parsing process is killed after it. Keep it under
    PDFQUEUE_JOB_TIMEOUT_S - 4 s, the time a job gives parsing, or a PDF at the limit is
    retried until its tries run out before it fails with `timeout`."""
    extract_max_pages: int = 50
    """Pages read per PDF when looking for an email; an email is almost always on page one."""
    extract_max_page_chars: int = Field(default=100_000, ge=1)
    """Characters of one page's text searched for addresses. A dense page has under 15,000; the
    cap bounds the work a page of hostile text can cause (the search is linear in it)."""
    extract_memory_bytes: int = 320 * 1024**2
    """Address-space limit of each parsing process, so a decompression bomb fails one file
    (256 MiB still reads ordinary PDFs and inflates a member of `PDFQUEUE_MAX_PDF_BYTES`;
    PDFium aborts its process at the limit, which fails that file as `too_large`)."""
    extract_tasks_per_process: int = 5000
    """Recycle a parsing process after this many tasks to bound slow leaks (a task is one PDF,
    or the group of a job's PDFs; its memory limit already bounds a fast leak; recycling every
    500 PDFs cost ~0.8 ms of CPU per PDF)."""
    pdf_engine: Literal["pdfium", "pypdf"] = "pdfium"
    """The PDF parser of the parsing processes. `pdfium` (Chrome's PDF engine, in C++) reads
    the text layer, `mailto:` links and, by OCR, scans. `pypdf` is pure Python, a memory-safe
    mode for operators who would rather not run a C++ parser on hostile input, at 1.4x to 11x
    the CPU per PDF (`bench/results/parse-20261202T002302Z.json`) and more PDFs that time out;
    it reads the text layer only (no links, no OCR: a scan is `skipped_no_match`, `needs_ocr`)."""
    ocr_max_pages: int = Field(default=2, ge=0)
    """Pages per PDF read by OCR (Tesseract) when they have no usable text layer: the first
    such page, then the next only while no user matched. 0 turns OCR off (such files are
    `skipped_no_match` with reason `needs_ocr`)."""
    ocr_timeout_s: float = Field(default=10.0, gt=0)
    """Hard limit for reading one PDF when OCR is needed (~1-2 s a page on one core), in
    place of PDFQUEUE_EXTRACT_TIMEOUT_S; keep it under PDFQUEUE_JOB_TIMEOUT_S - 4 s too."""
    placeholder_domains: Annotated[frozenset[str], NoDecode] = frozenset(PLACEHOLDER_DOMAINS)
    """Domains, comma separated, whose addresses never link (nor do their subdomains'):
    résumé templates ship with them (`hello@reallygreatsite.com`, `email@example.com`)."""

    @property
    def parsing_processes(self) -> int:
        """Parsing processes per worker: `extract_processes`, or one per CPU of this host."""
        return self.extract_processes or os.cpu_count() or 1

    @field_validator("placeholder_domains", mode="before")
    @classmethod
    def _parse_domains(cls, value: object) -> object:
        """A comma-separated set; domains compare in lower case."""
        return frozenset(entries(value.lower())) if isinstance(value, str) else value
