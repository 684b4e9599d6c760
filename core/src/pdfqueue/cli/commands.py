"""The client commands: upload, status, watch, cancel, retry, batches and files."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group
from rich.progress import DownloadColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from pdfqueue.cli.client import ApiError, Client, check_zip
from pdfqueue.cli.exits import EXIT_ALREADY_ENDED, EXIT_BATCH_ENDED, EXIT_ERROR, EXIT_OK
from pdfqueue.cli.failures import UploadInterrupted
from pdfqueue.cli.output import (
    ID_WIDTH,
    add_id_column,
    error,
    id_table,
    print_csv,
    print_json,
    say,
    show,
)
from pdfqueue.cli.progress import bar, batch_exit_code, follow, print_summary
from pdfqueue.domain.advice import advice
from pdfqueue.domain.models import TERMINAL, BatchStatus, FileResult

BATCH_COLUMNS = (
    "batch_id",
    "file_name",
    "status",
    "created_at",
    "completed_at",
    "duration_s",
    "total_files",
    "processed",
    "linked",
    "skipped_no_match",
    "skipped_already_exists",
    "skipped_ambiguous",
    "failed",
    "ignored",
)
"""`pdfqueue batches --csv`: the columns, in this order."""
FILE_NAME_WIDTH = 60
"""The file column of `pdfqueue files` folds longer names rather than widen the table."""


def cmd_upload(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:  # no token: refused before the file is read
        check_zip(args.file)  # a clear message before any bar or byte
        as_json = args.format == "json"
        try:
            created = _send(client, args, quiet=as_json)
        except KeyboardInterrupt:
            raise UploadInterrupted from None
        if not as_json:
            say(f"batch {created['batch_id']} accepted")
        if not args.wait:
            print_json(created) if as_json else print(created["batch_id"])
            return EXIT_OK
        status = follow(client, created["batch_id"], quiet=as_json)
    print_summary(status, as_json=as_json)
    return batch_exit_code(status)


def _send(client: Client, args: argparse.Namespace, *, quiet: bool) -> dict[str, Any]:
    if quiet:
        return client.upload(args.file)
    with bar(DownloadColumn(), TransferSpeedColumn()) as progress:
        task = progress.add_task("uploading", total=args.file.stat().st_size)
        return client.upload(args.file, lambda n: progress.advance(task, n))


def cmd_status(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        status = client.status(args.batch_id)
    print_summary(status, as_json=args.format == "json")
    ended = status["status"] in {BatchStatus.FAILED, BatchStatus.CANCELLED}
    return EXIT_BATCH_ENDED if ended else EXIT_OK  # a running batch is no error


def cmd_watch(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        status = follow(client, args.batch_id, quiet=args.format == "json")
    print_summary(status, as_json=args.format == "json")
    return batch_exit_code(status)


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel; a batch that had ended already is said so, and COMPLETED or FAILED exits
    EXIT_ALREADY_ENDED (nothing was cancelled; an already CANCELLED one is 0)."""
    with Client(args.url, args.token) as client:
        before = client.status(args.batch_id)
        after = client.cancel(args.batch_id)
    batch_id, ended = after["batch_id"], after["status"]
    if before["status"] == BatchStatus.CANCELLED:
        say(f"batch {batch_id} was cancelled already: nothing more to do")
    elif ended == BatchStatus.CANCELLED:
        say(
            f"batch {batch_id} cancelled: its pending files were dropped, files already"
            f" running finish and are counted; `pdfqueue files {batch_id}` reports them"
        )
    else:
        say(
            f"batch {batch_id} had already ended {ended}, so nothing was cancelled; its"
            f" report: pdfqueue files {batch_id}"
        )
    print_summary(after, as_json=args.format == "json")
    return EXIT_OK if ended == BatchStatus.CANCELLED else EXIT_ALREADY_ENDED


def cmd_retry(args: argparse.Namespace) -> int:
    as_json = args.format == "json"
    with Client(args.url, args.token) as client:
        try:
            started = client.retry(args.batch_id, all_failed=args.all_failed)
        except ApiError as exc:
            if exc.status != 409:
                raise
            error(_why_not_retried(client.status(args.batch_id), args.all_failed))
            return EXIT_ERROR
        if not args.wait:
            say(f"retrying batch {args.batch_id}; follow it: pdfqueue watch {args.batch_id}")
            print_summary(started, as_json=as_json)
            return EXIT_OK
        status = follow(client, args.batch_id, quiet=as_json)
    print_summary(status, as_json=as_json)
    return batch_exit_code(status)


def _why_not_retried(status: dict[str, Any], all_failed: bool) -> str:
    """Why the API refused the retry (409), from the batch itself, with the next step."""
    batch_id, state = status["batch_id"], status["status"]
    name = status.get("file_name") or "FILE.zip"
    upload = f"upload the ZIP again (`pdfqueue upload {name}`)"
    if state == BatchStatus.CANCELLED:
        return f"batch {batch_id} was cancelled, and a cancelled batch is not retried: {upload}"
    if state == BatchStatus.FAILED:
        why = f" ({status['error']})" if status.get("error") else ""
        return f"batch {batch_id} failed as a whole{why}, so no file can be retried: {upload}"
    if state not in TERMINAL:
        return (
            f"batch {batch_id} is {state} (it, or its retry, still runs): follow it with"
            f" `pdfqueue watch {batch_id}`, and retry once it has ended"
        )
    if not status.get("failed"):
        return f"no file of batch {batch_id} failed: there is nothing to retry"
    if all_failed:
        return f"batch {batch_id} cannot be retried now; try again in a moment"
    return (
        f"none of the {status['failed']} failed files of batch {batch_id} failed for a reason"
        f" a retry may fix (`pdfqueue files {batch_id} --outcome failed` says why);"
        f" `pdfqueue retry {batch_id} --all-failed` re-runs them anyway"
    )


def cmd_batches(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        batches: list[dict[str, Any]] = client.batches(limit=args.limit)["batches"]
    if args.format == "json":
        print_json(batches)
    elif args.format == "csv":
        print_csv(BATCH_COLUMNS, batches)
    else:
        show(_batches_table(batches))
    return EXIT_OK


def _batches_table(batches: list[dict[str, Any]]) -> Table:
    """Within 80 columns: the id whole with the file's name under it, the status with
    when it was uploaded (UTC) under it, then the counts."""
    table = Table(
        title="your batches, newest first",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
    )
    add_id_column(table)
    table.add_column("status")
    for column in ("files", "linked", "failed", "took"):
        table.add_column(column, justify="right")
    for b in batches:
        name = b.get("file_name") or ""
        if len(name) > ID_WIDTH:  # display only: --json and --csv have it whole
            name = name[: ID_WIDTH - 1] + "…"
        uploaded = datetime.fromisoformat(b["created_at"]).strftime("%m-%d %H:%M")
        table.add_row(
            Group(Text(b["batch_id"], no_wrap=True, overflow="ignore"), Text(name, style="dim")),
            Group(b["status"], Text(uploaded, style="dim")),
            "…" if b["total_files"] is None else str(b["total_files"]),
            str(b["linked"]),
            str(b["failed"]),
            _took(b.get("duration_s")),
        )
    return table


def _took(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def cmd_files(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        rows = client.files(args.batch_id)
    if args.outcome:
        rows = [r for r in rows if r["outcome"] == args.outcome]
    if args.format == "csv":
        print_csv(list(FileResult.model_fields), rows)
    elif args.format == "json":
        print_json(rows)
    else:
        table = id_table(f"batch {args.batch_id}: {len(rows)} files")
        table.add_column("#", justify="right")
        table.add_column("file", overflow="fold", max_width=FILE_NAME_WIDTH)
        table.add_column("outcome")
        table.add_column("why, and what to do", overflow="fold")
        for r in rows:
            words = advice(r.get("reason"))
            why = f"{words[0]} {words[1]}" if words else ""
            table.add_row(str(r["index"]), r["name"], r["outcome"], why)
        show(table)
    return EXIT_OK
