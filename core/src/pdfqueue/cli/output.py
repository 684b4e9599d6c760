"""What the client commands print: tables that never cut an id, CSV, JSON, and their options."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from pdfqueue.domain.csvsafe import csv_line

stderr = Console(stderr=True)
ID_WIDTH = 32
"""A batch id's characters: a column or a title holding one never gets narrower."""
UNBOUNDED = 10_000
"""A width no table reaches: measured at it, a table says the width nothing is cut at."""


def add_format(p: argparse.ArgumentParser, *formats: str) -> None:
    """`--format F` and its shorthands `--json`, `--csv`, the same on every command that
    prints data: `table` (the default, for a person) and those of `formats`."""
    choices = ["table", *formats]
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--format",
        choices=choices,
        default="table",
        type=str.lower,
        help="what to print on stdout (default table, for a person to read)",
    )
    for name in formats:
        group.add_argument(
            f"--{name}",
            dest="format",
            action="store_const",
            const=name,
            help=f"the same as --format {name}",
        )


def id_table(title: str | None = None, **options: Any) -> Table:
    """A table whose title, holding an id, is never wrapped through the id."""
    return Table(title=title, min_width=len(title or ""), **options)


def add_id_column(table: Table, header: str = "batch") -> None:
    """A column of batch ids: whole on one line, at any width (they are copied)."""
    table.add_column(header, no_wrap=True, min_width=ID_WIDTH, overflow="ignore")


class _Stdout(Console):
    """stdout; a closed pipe raises BrokenPipeError like any write, for `main` to end on
    with EXIT_PIPE_CLOSED (rich's own way is a silent exit 1)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def show(table: Table) -> None:
    """Print `table` on stdout at the terminal's width (80 when piped, or $COLUMNS); wider
    when it needs more to keep its ids whole, rather than cut one."""
    console = _Stdout()
    needed = Measurement.get(console, console.options.update_width(UNBOUNDED), table).minimum
    if needed > console.width:
        console = _Stdout(width=needed)
    console.print(table, highlight=False)


def print_json(value: Any) -> None:
    print(json.dumps(value))


def print_csv(columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    """CSV as the API writes it (formulas defused), a header line first."""
    out = sys.stdout.buffer
    out.write(csv_line(columns))
    for row in rows:
        out.write(csv_line(row.get(c) for c in columns))
    out.flush()


def say(message: str | Text) -> None:
    """A line for the person on stderr, never broken at the console's width: the ids and
    commands in it get copied. Plain text: brackets in it are not markup."""
    stderr.print(message, soft_wrap=True, highlight=False, markup=False)


def error(message: str) -> None:
    say(Text.assemble(("error:", "red"), " ", message))
