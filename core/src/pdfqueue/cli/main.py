"""The `pdfqueue` command: client commands here, service commands plugged in by entry points."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from rich.console import Console

from pdfqueue.cli import data
from pdfqueue.cli.admin import register as register_admin
from pdfqueue.cli.commands import (
    cmd_batches,
    cmd_cancel,
    cmd_files,
    cmd_retry,
    cmd_status,
    cmd_upload,
    cmd_watch,
)
from pdfqueue.cli.exits import (
    EXIT_ALREADY_ENDED,
    EXIT_BATCH_ENDED,
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_FILES_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    EXIT_USAGE,
)
from pdfqueue.cli.failures import guarded, pipe_closed
from pdfqueue.cli.output import add_format
from pdfqueue.cli.progress import OUTCOME_LABELS, follow, print_summary

__all__ = [  # what tests and the demo take from here
    "EXIT_ALREADY_ENDED",
    "EXIT_BATCH_ENDED",
    "EXIT_CODES",
    "EXIT_ERROR",
    "EXIT_FILES_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE_CLOSED",
    "build_parser",
    "follow",
    "main",
    "print_summary",
]
console = Console(stderr=True)
BATCH_ID_HELP = (
    "the batch's id: 32 hex characters, as upload printed (`pdfqueue batches` lists them)"
)


def main(argv: list[str] | None = None) -> int:
    """The command's exit code; nothing it meets ends in a traceback, a closed stdout
    included (`pdfqueue files ID --csv | head`)."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        return pipe_closed()


def _main(argv: list[str]) -> int:
    try:  # Ctrl-C while the parser imports a plug-in, or asks for nothing yet
        parser = build_parser(only=argv[0] if argv else None)
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    if not hasattr(args, "run"):
        parser.print_help()
        return EXIT_USAGE
    return guarded(lambda: int(args.run(args)), args)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; `only` names the command being run, so just its plug-in is imported.

    Importing a service package is not free (the operator's kopf handlers take half a
    second), so `pdfqueue status` loads none and `pdfqueue --help` loads them all.
    """
    parser = argparse.ArgumentParser(prog="pdfqueue", description=__doc__)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")

    p = sub.add_parser("migrate", help="apply database migrations and create the bucket")
    p.set_defaults(run=cmd_migrate)

    p = _command(
        sub,
        "upload",
        "upload a ZIP of PDFs",
        "pdfqueue upload resumes.zip --wait\n"
        "  pdfqueue upload resumes.zip --wait --json > summary.json",
    )
    p.add_argument("file", type=Path, help="the ZIP archive of PDFs")
    p.add_argument("--wait", action="store_true", help="follow progress until the batch ends")
    add_format(p, "json")
    p.set_defaults(run=cmd_upload)

    p = _command(sub, "status", "show a batch's progress", "pdfqueue status 3f2a...")
    p.add_argument("batch_id", help=BATCH_ID_HELP)
    add_format(p, "json")
    p.set_defaults(run=cmd_status)

    p = _command(sub, "watch", "follow a running batch until it ends", "pdfqueue watch 3f2a...")
    p.add_argument("batch_id", help=BATCH_ID_HELP)
    add_format(p, "json")  # json: no bar, the final summary
    p.set_defaults(run=cmd_watch)

    p = _command(sub, "batches", "list your batches, newest first", "pdfqueue batches --limit 50")
    p.add_argument("--limit", type=int, default=20, help="how many (default 20, at most 100)")
    add_format(p, "json", "csv")
    p.set_defaults(run=cmd_batches)

    p = _command(
        sub,
        "files",
        "print a batch's per-file report",
        "pdfqueue files 3f2a... --outcome failed\n  pdfqueue files 3f2a... --csv > report.csv",
    )
    p.add_argument("batch_id", help=BATCH_ID_HELP)
    p.add_argument(
        "--outcome",
        choices=[*OUTCOME_LABELS, "ignored", "retrying"],
        help="only files with this outcome",
    )
    add_format(p, "json", "csv")  # csv: as the API's report
    p.set_defaults(run=cmd_files)

    p = _command(
        sub, "cancel", "cancel a batch: pending work is dropped", "pdfqueue cancel 3f2a..."
    )
    p.add_argument("batch_id", help=BATCH_ID_HELP)
    add_format(p, "json")
    p.set_defaults(run=cmd_cancel)

    p = _command(
        sub,
        "retry",
        "re-run a finished batch's files that failed for a reason that may pass",
        "pdfqueue retry 3f2a... --wait\n  pdfqueue retry 3f2a... --all-failed",
    )
    p.add_argument("batch_id", help=BATCH_ID_HELP)
    p.add_argument(
        "--all-failed", action="store_true", help="re-run every failed file, whatever its reason"
    )
    p.add_argument("--wait", action="store_true", help="follow progress until the batch ends")
    add_format(p, "json")
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
        "--token",
        default=os.environ.get("PDFQUEUE_TOKEN"),
        help="your tenant's token (default $PDFQUEUE_TOKEN); required: without one nothing is sent",
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


if __name__ == "__main__":
    sys.exit(main())
