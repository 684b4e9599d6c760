"""Following a batch with a bar, its summary, and the exit code its end means."""

from __future__ import annotations

import time
from typing import Any

import httpx
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from pdfqueue.cli.client import Client
from pdfqueue.cli.exits import EXIT_BATCH_ENDED, EXIT_FILES_FAILED, EXIT_OK
from pdfqueue.cli.failures import StoppedWatching
from pdfqueue.cli.output import id_table, print_json, say, show, stderr
from pdfqueue.domain.advice import batch_advice
from pdfqueue.domain.models import TERMINAL, BatchStatus

OUTCOME_LABELS = {
    "linked": "linked",
    "skipped_no_match": "no match",
    "skipped_already_exists": "already linked",
    "skipped_ambiguous": "two users",
    "failed": "failed",
}


def batch_exit_code(status: dict[str, Any]) -> int:
    if status["status"] != BatchStatus.COMPLETED:
        return EXIT_BATCH_ENDED
    return EXIT_FILES_FAILED if status.get("failed") else EXIT_OK


def bar(*columns: ProgressColumn, disable: bool = False) -> Progress:
    """A progress bar on stderr: the task's description, the bar, `columns`, the time left."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        *columns,
        TimeRemainingColumn(),
        console=stderr,
        disable=disable,
    )


def counts_text(status: dict[str, Any]) -> str:
    return " · ".join(f"{label} {status.get(key, 0)}" for key, label in OUTCOME_LABELS.items())


def follow(client: Client, batch_id: str, *, quiet: bool = False, poll_s: float = 0.5) -> Any:
    """Follow the batch until it ends (its event stream; polling when streams keep failing),
    with a bar of processed files and counts by outcome unless `quiet`. Ctrl-C raises
    StoppedWatching: the batch goes on, and the message says how to follow it again."""
    try:
        return _follow(client, batch_id, quiet=quiet, poll_s=poll_s)
    except KeyboardInterrupt:
        raise StoppedWatching(batch_id) from None


def _follow(client: Client, batch_id: str, *, quiet: bool, poll_s: float) -> Any:
    status = client.status(batch_id)
    if status["status"] not in TERMINAL:
        say(f"following batch {batch_id}; Ctrl-C stops watching, the batch goes on")
    done = TextColumn("{task.completed}/{task.total}")
    counts = TextColumn("{task.fields[counts]}")
    with bar(TaskProgressColumn(), done, counts, disable=quiet) as progress:
        task = progress.add_task("processing", total=None, counts="")

        def update(status: dict[str, Any]) -> None:
            progress.update(
                task,
                total=status["total_files"],
                completed=status["processed"],
                counts=counts_text(status),
            )

        update(status)
        last_id, failures = None, 0
        while status["status"] not in TERMINAL:
            try:
                for event_id, event in client.events(batch_id, last_id):
                    last_id, status, failures = event_id, event, 0
                    update(status)
            except httpx.TransportError:
                failures += 1
            if status["status"] in TERMINAL:
                break
            if failures >= 3 or last_id is None:  # no stream here (a proxy?): poll instead
                time.sleep(poll_s)
                status = client.status(batch_id)
                update(status)
        return status


def print_summary(status: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print_json(status)
        return
    table = id_table(f"batch {status['batch_id']}: {status['status']}")
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
    show(table)
