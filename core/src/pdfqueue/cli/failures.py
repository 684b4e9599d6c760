"""A client command's failure in words with what to do next, and its exit code: no traceback."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import httpx

from pdfqueue.cli.client import ApiError, MissingToken, NotAZip
from pdfqueue.cli.exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED
from pdfqueue.cli.output import error, say
from pdfqueue.domain.errors import (
    BatchNotFound,
    ConfigurationError,
    InvalidBatchId,
    PdfQueueError,
    TransientError,
)

TOKEN_HELP = (
    "pass --token or set PDFQUEUE_TOKEN to your tenant's token: the API's operator has it"  # noqa: S105 (words about a token, not one)
    " (the API reads its tokens from PDFQUEUE_API_TOKENS, as tenant:token entries), and"
    " `pdfqueue demo` prints the one of its own API"
)


class StoppedWatching(PdfQueueError):
    """Ctrl-C while following a batch: the batch goes on without us."""

    def __init__(self, batch_id: str) -> None:
        super().__init__(batch_id)
        self.batch_id = batch_id


class UploadInterrupted(PdfQueueError):
    """Ctrl-C while the ZIP was being sent: the API drops the part it received."""


def guarded(run: Callable[[], int], args: argparse.Namespace) -> int:
    """`run()`'s exit code, or the failure it raised said in words and its code."""
    try:
        code = run()
        sys.stdout.flush()  # a closed pipe shows here, inside the guard, not at exit
    except (StoppedWatching, UploadInterrupted, KeyboardInterrupt) as exc:
        say(_interrupted(exc))
        return EXIT_INTERRUPTED
    except (ApiError, NotAZip, MissingToken, httpx.TransportError, httpx.InvalidURL) as exc:
        error(_failure(exc, args))
        return EXIT_ERROR
    return code


def _interrupted(exc: BaseException) -> str:
    if isinstance(exc, StoppedWatching):
        return f"stopped watching; the batch goes on: pdfqueue watch {exc.batch_id}"
    if isinstance(exc, UploadInterrupted):
        return (
            "upload interrupted: the API drops what it received and creates no batch;"
            " run the same command again to upload the ZIP"
        )
    return "interrupted; run the command again to finish what it was doing"


def _failure(exc: Exception, args: argparse.Namespace) -> str:
    url = getattr(args, "url", "")
    if isinstance(exc, ApiError):
        message = explain(exc, args)
    elif isinstance(exc, NotAZip):
        message = f"{exc}; nothing was uploaded"
    elif isinstance(exc, MissingToken):
        message = f"no token, so nothing was sent: {TOKEN_HELP}"
    elif isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.UnsupportedProtocol):
        # refused, timed out, DNS: say where we tried
        message = (
            f"cannot reach the pdfqueue API at {url} ({exc or type(exc).__name__}): start it"
            " (`pdfqueue api`), or point --url (PDFQUEUE_URL) at the one that runs"
        )
    else:
        message = f"{url!r} is not a URL ({exc}): give --url as http://host:port"
    return message


def pipe_closed() -> int:
    """What stdout was written to is gone: stop quietly. Python's documented way (the note
    on SIGPIPE in `signal`): point stdout at /dev/null, so the flush at exit cannot fail
    again and print a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_PIPE_CLOSED


NEXT_STEPS = {
    httpx.codes.REQUEST_ENTITY_TOO_LARGE: "split the ZIP into smaller ones and upload each",
    httpx.codes.UNSUPPORTED_MEDIA_TYPE: "upload a ZIP file",
    httpx.codes.UNPROCESSABLE_ENTITY: "check the file (`unzip -l FILE` lists a ZIP's members)"
    " and upload a ZIP of PDFs",
    httpx.codes.CONFLICT: "`pdfqueue status ID` says where the batch is",
    httpx.codes.SERVICE_UNAVAILABLE: "try again in a minute; if it lasts, the API's log says"
    " which store is down",
}
"""What to do after a refusal the API's words may not say it for, by status."""


def explain(exc: ApiError, args: argparse.Namespace) -> str:
    """An API refusal in words, with what to do about it."""
    batch_id = getattr(args, "batch_id", None)
    command = getattr(args, "command", None) or "COMMAND"
    status = exc.status
    next_step = NEXT_STEPS.get(httpx.codes(status)) if status in NEXT_STEPS else None
    if status == httpx.codes.TOO_MANY_REQUESTS:
        next_step = f"try again in {exc.retry_after_s or 'a few'} s"
    elif status >= httpx.codes.INTERNAL_SERVER_ERROR and next_step is None:
        next_step = "try again; if it lasts, the API's log says why"
    if status == httpx.codes.UNAUTHORIZED:
        message = f"the API at {args.url} refused the token (it is not one it knows): {TOKEN_HELP}"
    elif status == httpx.codes.NOT_FOUND and batch_id and "pdfqueue API" not in exc.detail:
        message = (
            f"batch {batch_id} not found for this token (unknown, or another tenant's):"
            " `pdfqueue batches` lists yours"
        )
    elif any("batch_id" in e.get("loc", ()) for e in exc.errors):
        message = f"{exc.detail}; `pdfqueue batches` lists your batches and their ids"
    elif exc.errors:  # another parameter that does not fit
        message = f"{exc.detail}; `pdfqueue {command} --help` says what each option takes"
    elif next_step and "pdfqueue API" not in exc.detail:
        message = f"{exc.detail} (HTTP {status}): {next_step}"
    else:
        message = f"{exc.detail} (HTTP {status})"
    return message


def store_failure(exc: PdfQueueError) -> str:
    """An administrator's command failed at the stores: what, and what to do next."""
    if isinstance(exc, TransientError | ConfigurationError):
        return (
            f"{exc}: check PDFQUEUE_DATABASE_URL, PDFQUEUE_REDIS_URL and PDFQUEUE_STORAGE_URL"
            " (the worker's settings) and that those stores run"
        )
    if isinstance(exc, BatchNotFound | InvalidBatchId):
        return f"{exc}: `pdfqueue admin batches` lists every tenant's batches"
    return str(exc)
