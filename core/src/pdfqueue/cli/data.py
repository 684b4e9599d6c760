"""`pdfqueue purge`, `pdfqueue erase` and `pdfqueue audit`: what pdfqueue keeps, and removing it.

`erase BATCH_ID` is a tenant's command, through the API with its token. `purge`, `erase --email`
and `audit` are an administrator's: they need the database and the object store (the worker's
settings), not a token, and act across tenants.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from pdfqueue.cli.client import Client
from pdfqueue.cli.failures import store_failure
from pdfqueue.cli.output import add_format, error, show
from pdfqueue.domain.errors import InvalidDuration, PdfQueueError
from pdfqueue.domain.settings import Settings

console = Console(stderr=True)
T = TypeVar("T")
ERASE_WAIT_S = 600
"""How long `pdfqueue erase BATCH_ID` waits for a running batch's last jobs before it stops
(the erasure stays asked for: the next purge finishes it)."""


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    client_args: Callable[[argparse.ArgumentParser], None],
) -> None:
    p = sub.add_parser(
        "purge",
        help="remove ended batches past their retention (administrator: database access)",
        description="Remove every batch that ended longer ago than its tenant's retention"
        " (PDFQUEUE_RETENTION_DAYS, PDFQUEUE_TENANT_RETENTION_DAYS): its per-file rows, batch"
        " row, webhook records and ZIP. Linked PDFs and links stay. Running batches are never"
        " purged. Also finishes erasures still waiting, and drops old audit records.",
        epilog="example:\n  pdfqueue purge --older-than 90d --tenant acme --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--older-than", metavar="DURATION", type=duration, help="e.g. 30d, 12h, 0s (not retention)"
    )
    p.add_argument("--tenant", help="only this tenant's batches")
    p.add_argument("--dry-run", action="store_true", help="count what would go; remove nothing")
    add_format(p, "json")
    p.set_defaults(run=cmd_purge)

    p = sub.add_parser(
        "erase",
        help="erase a batch (tenant, through the API) or a person (administrator)",
        description="`erase BATCH_ID`: cancel the batch if it runs, then remove its ZIP, its"
        " rows, the PDFs it stored and the links to them (your token, through the API)."
        " `erase --email ADDRESS`: remove every PDF linked to that address's users, their link,"
        " and redact the file rows that matched them, in every tenant (database access).",
        epilog="examples:\n  pdfqueue erase 3f2a...\n  pdfqueue erase --email ann@example.com"
        " --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("batch_id", nargs="?", help="the batch to erase (or --email)")
    p.add_argument("--email", help="erase this person instead (administrator)")
    p.add_argument("--dry-run", action="store_true", help="with --email: count, remove nothing")
    add_format(p, "json")
    client_args(p)
    p.set_defaults(run=cmd_erase)

    p = sub.add_parser(
        "audit",
        help="list purges and erasures (administrator: database access)",
        description="The audit trail: one record per purge or erasure, with no personal data.",
        epilog="example:\n  pdfqueue audit --since 7d",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--since", metavar="DURATION", type=duration, default="30d", help="default 30d")
    add_format(p, "json")
    p.set_defaults(run=cmd_audit)


def duration(text: str) -> float:
    """Seconds of a DURATION option; a bad one is the parser's error, naming the option."""
    from pdfqueue.erasure import parse_duration

    try:
        return parse_duration(text)
    except InvalidDuration as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def cmd_purge(args: argparse.Namespace) -> int:
    older: float | None = args.older_than
    report = _with_eraser(
        lambda e: e.purge(older_than_s=older, tenant=args.tenant, dry_run=args.dry_run)
    )
    found = {
        **asdict(report.removed),
        "erasures_finished": report.erasures_finished,
        "audit_records_removed": report.audit_records_removed,
        "dry_run": args.dry_run,
    }
    if args.format == "json":
        print(json.dumps(found))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    r = report.removed
    console.print(
        f"purge {verb}: {r.batches} batches, {r.files} file rows, {r.objects} objects"
        f" ({r.bytes} bytes); {report.erasures_finished} waiting erasures finished;"
        f" {report.audit_records_removed} old audit records dropped",
        highlight=False,
    )
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    if (args.batch_id is None) == (args.email is None):
        console.print("[red]error:[/red] name a batch id or --email ADDRESS (one of them)")
        return 2
    if args.email is not None:
        removed = _with_eraser(lambda e: e.erase_person(args.email, dry_run=args.dry_run))
        if args.format == "json":
            print(json.dumps({**asdict(removed), "dry_run": args.dry_run}))
        else:
            verb = "would remove" if args.dry_run else "removed"
            console.print(
                f"erase {verb}: {removed.objects} PDFs ({removed.bytes} bytes),"
                f" {removed.links} links, {removed.files} file rows redacted",
                highlight=False,
            )
        return 0
    if args.dry_run:
        console.print("[red]error:[/red] --dry-run goes with --email")
        return 2
    with Client(args.url, args.token) as client:
        answer = _erase_batch(client, args.batch_id)
    if args.format == "json":
        print(json.dumps(answer))
    elif answer["erased"]:
        console.print(
            f"batch {answer['batch_id']} erased: {answer['objects']} objects"
            f" ({answer['bytes']} bytes), {answer['links']} links, {answer['files']} file rows",
            highlight=False,
        )
    else:
        console.print(
            f"batch {answer['batch_id']} is hidden and cancelled; its last jobs may still run,"
            " so the rest is removed by the next purge (or run this again later)",
            highlight=False,
        )
    return 0 if answer["erased"] else 1


def _erase_batch(client: Client, batch_id: str) -> dict[str, Any]:
    """Ask until the erasure is done (a running batch waits for its last jobs), or give up
    after ERASE_WAIT_S."""
    deadline = time.monotonic() + ERASE_WAIT_S
    while True:
        answer, retry_after = client.erase(batch_id)
        if answer["erased"] or time.monotonic() + retry_after > deadline:
            return answer
        console.print(f"waiting {retry_after} s for the batch's last jobs", highlight=False)
        time.sleep(retry_after)


def cmd_audit(args: argparse.Namespace) -> int:
    since = datetime.fromtimestamp(time.time() - args.since, UTC)
    records = _with_eraser(lambda e: e.retention.audit_since(since))
    if args.format == "json":
        print(json.dumps([{**asdict(r), "at": r.at.isoformat()} for r in records]))
        return 0
    table = Table("at", "actor", "action", "subject", "files", "objects", "bytes")
    for r in records:
        table.add_row(
            r.at.isoformat(timespec="seconds"),
            r.actor,
            r.action,
            r.subject,
            str(r.files),
            str(r.objects),
            str(r.bytes),
        )
    show(table)
    return 0


def _with_eraser(work: Callable[[Any], Awaitable[T]]) -> T:
    """Run `work` with an Eraser over the stores the settings name, then close them."""
    from pdfqueue.runtime.connections import ADMIN, Stores

    async def run() -> T:
        async with Stores.opened(Settings(), ADMIN) as stores:
            return await work(stores.eraser())

    try:
        return asyncio.run(run())
    except PdfQueueError as exc:
        error(store_failure(exc))
        raise SystemExit(1) from exc
