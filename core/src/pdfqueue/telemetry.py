"""Logging setup: JSON lines for machines, plain lines for a terminal."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_CONTEXT_FIELDS = ("batch_id", "job_id", "trace_id")


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
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = " ".join(f"{k}={getattr(record, k)}" for k in _CONTEXT_FIELDS if hasattr(record, k))
        return f"{line} [{ctx}]" if ctx else line


def setup_logging(level: int = logging.INFO, *, json_lines: bool | None = None) -> None:
    """JSON when stderr is not a terminal (containers), readable text when it is."""
    use_json = not sys.stderr.isatty() if json_lines is None else json_lines
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if use_json
        else TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level, handlers=[handler], force=True)
