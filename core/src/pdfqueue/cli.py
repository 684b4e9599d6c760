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
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from pdfqueue.client import ApiError, Client
from pdfqueue.models import TERMINAL, BatchStatus

console = Console(stderr=True)


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
        console.print(f"[red]error:[/red] {exc}")
        return 1
    except httpx.TransportError as exc:  # refused, timed out, DNS: say where we tried
        url = getattr(args, "url", "")
        console.print(f"[red]error:[/red] cannot reach the pdfqueue API at {url}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130
    return result


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; `only` names the command being run, so just its plug-in is imported.

    Importing a service package is not free (the operator's kopf handlers take half a
    second), so `pdfqueue status` loads none and `pdfqueue --help` loads them all.
    """
    parser = argparse.ArgumentParser(prog="pdfqueue", description=__doc__)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    p = sub.add_parser("migrate", help="apply database migrations and create the bucket")
    p.set_defaults(run=cmd_migrate)

    p = sub.add_parser("upload", help="upload a ZIP of PDFs")
    p.add_argument("file", type=Path)
    p.add_argument("--wait", action="store_true", help="follow progress until the batch ends")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    _client_args(p)
    p.set_defaults(run=cmd_upload)

    p = sub.add_parser("status", help="show a batch's progress")
    p.add_argument("batch_id")
    p.add_argument("--json", action="store_true")
    _client_args(p)
    p.set_defaults(run=cmd_status)

    p = sub.add_parser("cancel", help="cancel a batch: pending work is dropped")
    p.add_argument("batch_id")
    _client_args(p)
    p.set_defaults(run=cmd_cancel)

    p = sub.add_parser("demo", help="run the whole pipeline on generated résumés")
    p.add_argument("--files", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--no-wait", action="store_true", help="exit when the batch is done")
    p.set_defaults(run=cmd_demo)

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


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=os.environ.get("PDFQUEUE_URL", "http://127.0.0.1:8000"))
    p.add_argument("--token", default=os.environ.get("PDFQUEUE_TOKEN"))


def cmd_migrate(args: argparse.Namespace) -> int:
    from pdfqueue.provision import provision
    from pdfqueue.settings import Settings

    done = asyncio.run(provision(Settings()))
    console.print(f"migrations applied: {', '.join(done.migrations) or 'none (up to date)'}")
    console.print(f"storage {done.storage}: {'created' if done.bucket_created else 'ready'}")
    console.print(f"uploads expiry: {done.uploads_expiry}")
    return 0


def cmd_upload(args: argparse.Namespace) -> int:
    client = Client(args.url, args.token)
    size = args.file.stat().st_size
    if args.json:
        created = client.upload(args.file)
    else:
        with _bar() as bar:
            task = bar.add_task("uploading", total=size)
            created = client.upload(args.file, lambda n: bar.advance(task, n))
        console.print(f"batch [bold]{created['batch_id']}[/bold] accepted")
    if not args.wait:
        print(json.dumps(created) if args.json else created["batch_id"])
        return 0
    status = follow(client, created["batch_id"], quiet=args.json)
    print_summary(status, as_json=args.json)
    return 0 if status["status"] == BatchStatus.COMPLETED else 1


def cmd_status(args: argparse.Namespace) -> int:
    print_summary(Client(args.url, args.token).status(args.batch_id), as_json=args.json)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print_summary(Client(args.url, args.token).cancel(args.batch_id), as_json=False)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from pdfqueue.demo import run_demo

    code: int = run_demo(args.files, args.workers, args.port, wait=not args.no_wait)
    return code


def _bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(),
        console=console,
    )


def follow(client: Client, batch_id: str, *, quiet: bool = False, poll_s: float = 0.5) -> Any:
    """Poll the batch until it ends, with a progress bar unless `quiet`."""
    with _bar() if not quiet else _Null() as bar:
        task = bar.add_task("processing", total=None)
        while True:
            status = client.status(batch_id)
            bar.update(task, total=status["total_files"], completed=status["processed"])
            if status["status"] in TERMINAL:
                return status
            time.sleep(poll_s)


class _Null:
    def __enter__(self) -> _Null:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: Any, **kwargs: Any) -> TaskID:
        return TaskID(0)

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None


def print_summary(status: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(status))
        return
    table = Table(title=f"batch {status['batch_id']}: {status['status']}")
    table.add_column("")
    table.add_column("files", justify="right")
    for field in (
        "total_files",
        "processed",
        "linked",
        "skipped_no_match",
        "skipped_already_exists",
        "failed",
        "ignored",
    ):
        value = status.get(field)
        table.add_row(field, "—" if value is None else str(value))  # total unknown until ingest
    if status.get("error"):
        table.add_row("error", str(status["error"]))
    Console().print(table)


if __name__ == "__main__":
    sys.exit(main())
