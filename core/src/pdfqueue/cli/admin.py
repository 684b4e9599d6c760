"""`pdfqueue admin`: every tenant's batches and their rebuild, from the stores (no API token)."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from pdfqueue.cli.failures import store_failure
from pdfqueue.cli.output import add_format, error, show
from pdfqueue.domain.errors import BatchNotFound, PdfQueueError
from pdfqueue.domain.models import TERMINAL
from pdfqueue.lifecycle import Lifecycle

console = Console(stderr=True)
EXIT_OK, EXIT_ERROR = 0, 1
IDLE_MINUTES = 15.0
"""`--stuck` default: a running batch that recorded no file for this long."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "admin",
        help="operators: every tenant's batches, rebuilding one (database access, no token)",
        description="Commands for operators. They read PDFQUEUE_DATABASE_URL and"
        " PDFQUEUE_REDIS_URL (and PDFQUEUE_QUEUE_NAME), like the workers, not an API token.",
    )

    def usage(_: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(run=usage)
    admin = p.add_subparsers(title="admin commands", metavar="COMMAND")
    b = admin.add_parser(
        "batches",
        help="list batches across tenants, newest first",
        description="List batches across tenants, newest first. --stuck: only running batches"
        " (PENDING, PROCESSING) that the reconciler would rebuild (live state missing or"
        " behind PostgreSQL, or no work queued while files lack an outcome), or that recorded"
        " no file for --idle-minutes.",
    )
    b.add_argument("--stuck", action="store_true", help="only batches that are stuck")
    b.add_argument("--tenant", help="only this tenant's batches")
    b.add_argument(
        "--idle-minutes",
        type=float,
        default=IDLE_MINUTES,
        help=f"with --stuck: no file recorded for this long (default {IDLE_MINUTES:g})",
    )
    b.add_argument("--limit", type=int, default=50, help="how many at most (default 50)")
    add_format(b, "json")
    b.set_defaults(run=_sync(admin_batches))
    r = admin.add_parser(
        "requeue",
        help="rebuild one batch from PostgreSQL if Redis lost its state or work",
        description="Run the reconciler for one batch: rebuild its live state and queue its"
        " files without an outcome again if Redis lost them; nothing when it is healthy.",
    )
    r.add_argument("batch_id", help="the batch's id")
    add_format(r, "json")
    r.set_defaults(run=_sync(admin_requeue))


def _sync(
    command: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> Callable[..., int]:
    """The command run to its end; a pdfqueue error in words, without a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            return asyncio.run(command(args))
        except PdfQueueError as exc:
            error(store_failure(exc))
            return EXIT_ERROR

    return run


@asynccontextmanager
async def _lifecycle() -> AsyncIterator[Lifecycle]:
    """The batch lifecycle over the administrator's stores, for the command's run."""
    from pdfqueue.domain.settings import Settings
    from pdfqueue.runtime.connections import ADMIN, Stores

    async with Stores.opened(Settings(), ADMIN) as stores:
        yield stores.lifecycle


async def admin_batches(args: argparse.Namespace) -> int:
    from pdfqueue.recovery import stalled, survey

    async with _lifecycle() as lifecycle:
        found = await lifecycle.batches.activity(
            tenant=args.tenant,
            running=args.stuck,
            limit=None if args.stuck else max(args.limit, 1),
            queue_name=lifecycle.queue_name if args.stuck else None,
        )
        rows: list[dict[str, Any]] = []
        health = await survey(lifecycle, [a.row.summary.batch_id for a in found]) if found else {}
        for a in found:
            s = a.row.summary
            why = health[s.batch_id].why if s.batch_id in health else []
            if s.status not in TERMINAL and stalled(a, args.idle_minutes * 60):
                why.append(f"no file recorded for {args.idle_minutes:g} min")
            if args.stuck and not why:
                continue
            rows.append(
                {
                    "batch_id": s.batch_id,
                    "tenant": a.row.tenant,
                    "status": s.status.value,
                    "total_files": s.total_files,
                    "recorded": a.recorded,
                    "created_at": s.created_at.isoformat(),
                    "last_recorded_at": a.last_recorded_at.isoformat()
                    if a.last_recorded_at
                    else None,
                    "stuck": why,
                }
            )
    rows = rows[: max(args.limit, 1)]
    if args.format == "json":
        print(json.dumps(rows))
        return EXIT_OK
    title = "stuck batches" if args.stuck else "batches of every tenant, newest first"
    table = Table(title=title)
    table.add_column("batch", no_wrap=True, min_width=32)  # copied into `admin requeue`
    for column in ("tenant", "status", "files", "recorded", "last file", "stuck"):
        table.add_column(column, justify="right" if column in {"files", "recorded"} else "left")
    for r in rows:
        table.add_row(
            r["batch_id"],
            r["tenant"],
            r["status"],
            "…" if r["total_files"] is None else str(r["total_files"]),
            str(r["recorded"]),
            _ago(r["last_recorded_at"]),
            "; ".join(r["stuck"]),
        )
    show(table)
    return EXIT_OK


def _ago(when: str | None) -> str:
    if when is None:
        return "never"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(when)).total_seconds()
    return f"{seconds / 60:.0f} min ago" if seconds >= 120 else f"{seconds:.0f} s ago"


async def admin_requeue(args: argparse.Namespace) -> int:
    from pdfqueue.domain import keys
    from pdfqueue.recovery import reconcile_batch

    batch_id = keys.checked(args.batch_id)
    async with _lifecycle() as lifecycle:
        row = await lifecycle.batches.get(batch_id)
        if row is None:
            raise BatchNotFound(batch_id)
        done = await reconcile_batch(lifecycle, batch_id)
    if done is None:
        console.print(f"batch {batch_id} is being rebuilt by another reconciler right now")
        return EXIT_ERROR
    summary = done.summary or row.summary
    total = "?" if summary.total_files is None else summary.total_files
    result = {
        "batch_id": batch_id,
        "tenant": row.tenant,
        "status": summary.status.value,
        "rebuilt": list(done.what),
        "processed": summary.processed,
        "total_files": summary.total_files,
    }
    if args.format == "json":
        print(json.dumps(result))
    elif row.summary.status in TERMINAL:
        print(f"batch {batch_id} is {row.summary.status.value}: nothing to rebuild")
    elif done.what:
        words = {
            "state": "live state",
            "jobs": "jobs of files without an outcome",
            "ingest": "ingest",
        }
        print(
            f"batch {batch_id} (tenant {row.tenant}) rebuilt: "
            + ", ".join(words[w] for w in done.what)
            + f"; {summary.processed} of {total} files recorded"
        )
    else:
        print(
            f"batch {batch_id} (tenant {row.tenant}) is healthy: its live state and work are"
            f" in Redis ({summary.status.value}, {summary.processed} of {total} files recorded)"
        )
    return EXIT_OK
