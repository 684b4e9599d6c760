"""The `pdfqueue` command: client commands here, service commands plugged in by entry points."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from pdfqueue.cli import data
from pdfqueue.cli.admin import register as register_admin
from pdfqueue.cli.client import ApiError, Client, NotAZip, check_zip
from pdfqueue.domain.advice import advice, batch_advice
from pdfqueue.domain.csvsafe import csv_line
from pdfqueue.domain.models import TERMINAL, BatchStatus, FileResult

console = Console(stderr=True)

EXIT_OK = 0
"""The command did what was asked; for a batch: it completed and no file failed."""
EXIT_ERROR = 1
"""A request failed: wrong URL, server down, bad token, unknown batch, not a ZIP."""
EXIT_USAGE = 2
"""The command line itself is wrong (argparse)."""
EXIT_FILES_FAILED = 3
"""The batch completed, but at least one file failed (see `pdfqueue files ID --outcome failed`)."""
EXIT_BATCH_ENDED = 4
"""The batch ended FAILED (its archive was rejected or holds no PDF) or CANCELLED."""
EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done; for a batch: completed and no file failed
  {EXIT_ERROR}  a request failed (wrong URL, server down, bad token, unknown batch, not a ZIP)
  {EXIT_USAGE}  wrong command line
  {EXIT_FILES_FAILED}  the batch completed but some files failed
  {EXIT_BATCH_ENDED}  the batch failed as a whole or was cancelled
  130 interrupted (the batch goes on; `pdfqueue watch ID` follows it again)"""
OUTCOME_LABELS = {
    "linked": "linked",
    "skipped_no_match": "no match",
    "skipped_already_exists": "already linked",
    "skipped_ambiguous": "two users",
    "failed": "failed",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        result: int = args.run(args)
    except ApiError as exc:
        console.print(f"[red]error:[/red] {explain(exc, args)}", highlight=False)
        return EXIT_ERROR
    except NotAZip as exc:
        console.print(f"[red]error:[/red] {exc}; nothing was uploaded", highlight=False)
        return EXIT_ERROR
    except httpx.TransportError as exc:  # refused, timed out, DNS: say where we tried
        url = getattr(args, "url", "")
        console.print(
            f"[red]error:[/red] cannot reach the pdfqueue API at {url}"
            f" ({exc or type(exc).__name__}); is it running, and is --url (PDFQUEUE_URL) right?",
            highlight=False,
            soft_wrap=True,  # never break the URL at the console's width: it gets copied
        )
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    return result


def explain(exc: ApiError, args: argparse.Namespace) -> str:
    """An API refusal in words, with what to do about the usual ones."""
    if exc.status == httpx.codes.UNAUTHORIZED:
        return "the API refused the token: set PDFQUEUE_TOKEN (or --token) to your tenant's token"
    batch_id = getattr(args, "batch_id", None)
    if exc.status == httpx.codes.NOT_FOUND and batch_id and "pdfqueue API" not in exc.detail:
        return f"batch {batch_id} not found for this token (unknown, or another tenant's)"
    return str(exc)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; `only` names the command being run, so just its plug-in is imported.

    Importing a service package is not free (the operator's kopf handlers take half a
    second), so `pdfqueue status` loads none and `pdfqueue --help` loads them all.
    """
    parser = argparse.ArgumentParser(prog="pdfqueue", description=__doc__)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    p = sub.add_parser("migrate", help="apply database migrations and create the bucket")
    p.set_defaults(run=cmd_migrate)

    p = _command(
        sub,
        "upload",
        "upload a ZIP of PDFs",
        "pdfqueue upload resumes.zip --wait\n"
        "  pdfqueue upload resumes.zip --wait --json > summary.json",
    )
    p.add_argument("file", type=Path, help="the ZIP of PDFs to upload")
    p.add_argument("--wait", action="store_true", help="follow progress until the batch ends")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=cmd_upload)

    p = _command(sub, "status", "show a batch's progress", "pdfqueue status 3f2a...")
    p.add_argument("batch_id", help="the batch's id, as upload printed it")
    p.add_argument(
        "--json", action="store_true", help="print the API's JSON (with created_at, completed_at)"
    )
    p.set_defaults(run=cmd_status)

    p = _command(sub, "watch", "follow a running batch until it ends", "pdfqueue watch 3f2a...")
    p.add_argument("batch_id", help="the batch's id, as upload printed it")
    p.add_argument("--json", action="store_true", help="no bar; print the final JSON summary")
    p.set_defaults(run=cmd_watch)

    p = _command(sub, "batches", "list your batches, newest first", "pdfqueue batches --limit 50")
    p.add_argument("--limit", type=int, default=20, help="how many (default 20, at most 100)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_batches)

    p = _command(
        sub,
        "files",
        "print a batch's per-file report",
        "pdfqueue files 3f2a... --outcome failed\n  pdfqueue files 3f2a... --csv > report.csv",
    )
    p.add_argument("batch_id", help="the batch's id, as upload printed it")
    p.add_argument(
        "--outcome",
        choices=[*OUTCOME_LABELS, "ignored", "retrying"],
        help="only files with this outcome",
    )
    p.add_argument("--csv", action="store_true", help="CSV (as the API's report) on stdout")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=cmd_files)

    p = _command(
        sub, "cancel", "cancel a batch: pending work is dropped", "pdfqueue cancel 3f2a..."
    )
    p.add_argument("batch_id", help="the batch's id, as upload printed it")
    p.set_defaults(run=cmd_cancel)

    p = _command(
        sub,
        "retry",
        "re-run a finished batch's files that failed for a reason that may pass",
        "pdfqueue retry 3f2a... --wait\n  pdfqueue retry 3f2a... --all-failed",
    )
    p.add_argument("batch_id", help="the batch's id, as upload printed it")
    p.add_argument(
        "--all-failed", action="store_true", help="re-run every failed file, whatever its reason"
    )
    p.add_argument("--wait", action="store_true", help="follow progress until the batch ends")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(run=cmd_retry)

    data.add_commands(sub, _client_args)
    register_admin(sub)

    plugins = entry_points(group="pdfqueue.commands")
    if only in plugins.names:
        plugins = plugins.select(name=only)
    elif only in sub.choices:
        plugins = plugins.select(name="")  # a core command: no plug-in needed
    for ep in plugins:
        try:
            ep.load()(sub)
        except ImportError as exc:  # an image without that service: say so, keep the rest
            console.print(f"[yellow]command {ep.name!r} unavailable:[/yellow] {exc}")
    return parser


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, what: str, example: str
) -> argparse.ArgumentParser:
    """A client command: its help ends with an example and the exit codes."""
    p = sub.add_parser(
        name,
        help=what,
        description=what,
        epilog=f"example:\n  {example}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _client_args(p)
    return p


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        default=os.environ.get("PDFQUEUE_URL", "http://127.0.0.1:8000"),
        help="the API (default $PDFQUEUE_URL or http://127.0.0.1:8000)",
    )
    p.add_argument(
        "--token", default=os.environ.get("PDFQUEUE_TOKEN"), help="default $PDFQUEUE_TOKEN"
    )


def cmd_migrate(args: argparse.Namespace) -> int:
    from pdfqueue.domain.settings import Settings
    from pdfqueue.runtime.provision import provision

    done = asyncio.run(provision(Settings()))
    console.print(f"migrations applied: {', '.join(done.migrations) or 'none (up to date)'}")
    console.print(f"schema version: {done.schema.version}")
    console.print(f"storage {done.storage}: {'created' if done.bucket_created else 'ready'}")
    console.print(f"uploads expiry: {done.uploads_expiry}")
    return 0


def cmd_upload(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        return _upload(client, args)


def _upload(client: Client, args: argparse.Namespace) -> int:
    check_zip(args.file)  # a clear message before any bar or byte
    if args.json:
        created = client.upload(args.file)
    else:
        with _bar(DownloadColumn(), TransferSpeedColumn()) as bar:
            task = bar.add_task("uploading", total=args.file.stat().st_size)
            created = client.upload(args.file, lambda n: bar.advance(task, n))
        console.print(f"batch [bold]{created['batch_id']}[/bold] accepted", highlight=False)
    if not args.wait:
        print(json.dumps(created) if args.json else created["batch_id"])
        return EXIT_OK
    status = follow(client, created["batch_id"], quiet=args.json)
    print_summary(status, as_json=args.json)
    return batch_exit_code(status)


def cmd_status(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        status = client.status(args.batch_id)
    print_summary(status, as_json=args.json)
    ended = status["status"] in {BatchStatus.FAILED, BatchStatus.CANCELLED}
    return EXIT_BATCH_ENDED if ended else EXIT_OK  # a running batch is no error


def cmd_watch(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        status = follow(client, args.batch_id, quiet=args.json)
    print_summary(status, as_json=args.json)
    return batch_exit_code(status)


def cmd_cancel(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        print_summary(client.cancel(args.batch_id), as_json=False)
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        started = client.retry(args.batch_id, all_failed=args.all_failed)
        if not args.wait:
            print_summary(started, as_json=args.json)
            return EXIT_OK
        status = follow(client, args.batch_id, quiet=args.json)
    print_summary(status, as_json=args.json)
    return batch_exit_code(status)


def cmd_batches(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        page = client.batches(limit=max(1, min(args.limit, 100)))
    if args.json:
        print(json.dumps(page["batches"]))
        return EXIT_OK
    table = Table(title="your batches, newest first")
    for column in ("batch", "file", "uploaded", "status", "files", "linked", "failed", "took"):
        table.add_column(
            column, justify="right" if column in {"files", "linked", "failed"} else "left"
        )
    for b in page["batches"]:
        took = b.get("duration_s")
        table.add_row(
            b["batch_id"],
            b.get("file_name") or "",
            b["created_at"][:19].replace("T", " "),
            b["status"],
            "…" if b["total_files"] is None else str(b["total_files"]),
            str(b["linked"]),
            str(b["failed"]),
            "" if took is None else f"{took:.1f} s",
        )
    Console().print(table)
    return EXIT_OK


def cmd_files(args: argparse.Namespace) -> int:
    with Client(args.url, args.token) as client:
        rows = client.files(args.batch_id)
    if args.outcome:
        rows = [r for r in rows if r["outcome"] == args.outcome]
    if args.csv:
        columns = list(FileResult.model_fields)
        sys.stdout.buffer.write(csv_line(columns))
        for r in rows:
            sys.stdout.buffer.write(csv_line(r.get(c) for c in columns))
        sys.stdout.flush()
        return EXIT_OK
    if args.json:
        print(json.dumps(rows))
        return EXIT_OK
    table = Table(title=f"batch {args.batch_id}: {len(rows)} files")
    table.add_column("#", justify="right")
    table.add_column("file", overflow="fold")
    table.add_column("outcome")
    table.add_column("why, and what to do", overflow="fold")
    for r in rows:
        words = advice(r.get("reason"))
        table.add_row(
            str(r["index"]), r["name"], r["outcome"], f"{words[0]} {words[1]}" if words else ""
        )
    Console().print(table, highlight=False)
    return EXIT_OK


def batch_exit_code(status: dict[str, Any]) -> int:
    if status["status"] != BatchStatus.COMPLETED:
        return EXIT_BATCH_ENDED
    return EXIT_FILES_FAILED if status.get("failed") else EXIT_OK


def _bar(*columns: ProgressColumn, disable: bool = False) -> Progress:
    """A progress bar on stderr: the task's description, the bar, `columns`, the time left."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        TimeRemainingColumn(),
        console=console,
        disable=disable,
    )


def counts_text(status: dict[str, Any]) -> str:
    return " · ".join(f"{label} {status.get(key, 0)}" for key, label in OUTCOME_LABELS.items())


def follow(client: Client, batch_id: str, *, quiet: bool = False, poll_s: float = 0.5) -> Any:
    """Follow the batch until it ends (its event stream; polling when streams keep failing),
    with a bar of processed files and counts by outcome unless `quiet`."""
    done = TextColumn("{task.completed}/{task.total}")
    counts = TextColumn("{task.fields[counts]}")
    with _bar(TaskProgressColumn(), done, counts, disable=quiet) as bar:
        task = bar.add_task("processing", total=None, counts="")

        def show(status: dict[str, Any]) -> None:
            bar.update(
                task,
                total=status["total_files"],
                completed=status["processed"],
                counts=counts_text(status),
            )

        status = client.status(batch_id)
        show(status)
        last_id, failures = None, 0
        while status["status"] not in TERMINAL:
            try:
                for event_id, update in client.events(batch_id, last_id):
                    last_id, status, failures = event_id, update, 0
                    show(status)
            except httpx.TransportError:
                failures += 1
            if status["status"] in TERMINAL:
                break
            if failures >= 3 or last_id is None:  # no stream here (a proxy?): poll instead
                time.sleep(poll_s)
                status = client.status(batch_id)
                show(status)
        return status


def print_summary(status: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(status))
        return
    title = f"batch {status['batch_id']}: {status['status']}"
    table = Table(title=title, min_width=len(title))  # the title on one line, not wrapped
    table.add_column("")
    table.add_column("files", justify="right")
    for field in ("total_files", "processed", *OUTCOME_LABELS, "ignored"):
        value = status.get(field)
        table.add_row(field, "—" if value is None else str(value))  # total unknown until ingest
    if status.get("error"):
        table.add_row("error", str(status["error"]))
    words = batch_advice(status.get("reason"))
    if words:
        table.add_row(str(status["reason"]), f"{words[0]} {words[1]}")
    Console().print(table)


if __name__ == "__main__":
    sys.exit(main())
