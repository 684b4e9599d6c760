"""Logging setup: JSON lines for machines, plain lines for a terminal, context added for free."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import IO

from opentelemetry import trace

_CONTEXT_FIELDS = ("batch_id", "job_id", "trace_id")
_context: ContextVar[dict[str, str]] = ContextVar("pdfqueue_log_context", default={})  # noqa: B039 (never mutated)

# Anything shaped like an address, however it got into a message (an exception text, a file
# name): logs and spans must never carry one. Broader than the extractor's pattern on purpose.
_EMAIL_LIKE = re.compile(r"[^\s@<>\"'(),;:\[\]]+@[^\s@<>\"'(),;:\[\]]+\.[^\s@<>\"'(),;:\[\]]+")


def redact(text: str) -> str:
    """`text` with every email-shaped token replaced by `<email>`."""
    return _EMAIL_LIKE.sub("<email>", text) if "@" in text else text


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Add `batch_id`/`job_id` to every log line written inside this block (this task only)."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)


# arq logs each job's start and end outside the job's own context; its lines name the job id
# (`ingest:<batch>`, `process:<batch>:[r<round>:]<index>`, `retry:<batch>:<round>`, see
# pdfqueue.domain.keys), which is enough.
_ARQ_JOB = re.compile(r"\b((?:ingest|process|retry|webhook|delivery):([0-9a-f]{32})(?::r?\d+)*)\b")


class ContextFilter(logging.Filter):
    """Fills in batch_id/job_id from `log_context` and trace_id from the current span.

    A value passed with `extra=` wins. Installed on the handler, so every logger gets it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        if record.name.startswith("arq") and not hasattr(record, "job_id"):
            found = _ARQ_JOB.search(record.getMessage())
            if found:
                record.job_id, record.batch_id = found.group(1), found.group(2)
        if not hasattr(record, "trace_id"):
            span = trace.get_current_span().get_span_context()
            if span.is_valid:
                record.trace_id = trace.format_trace_id(span.trace_id)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: getattr(record, k) for k in _CONTEXT_FIELDS if hasattr(record, k)})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in _CONTEXT_FIELDS if hasattr(record, k))
        return redact(f"{line} [{ctx}]" if ctx else line)


def log_handler(*, json_lines: bool, stream: IO[str] | None = None) -> logging.Handler:
    """A handler (stderr unless `stream`) with the context filter and the chosen format."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    return handler


def setup_logging(level: int = logging.INFO, *, json_lines: bool | None = None) -> None:
    """JSON when stderr is not a terminal (containers), readable text when it is."""
    use_json = not sys.stderr.isatty() if json_lines is None else json_lines
    logging.basicConfig(level=level, handlers=[log_handler(json_lines=use_json)], force=True)
