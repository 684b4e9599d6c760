"""`python -m bench.all`: every benchmark the docs cite, in one go, on one commit.

Each program runs as a child on the same services, one after the other, with the options the
docs give for it; the index file lists the result file each wrote, so the docs can cite one run
of everything at one commit. The pods benchmark needs the node and runs on its own
(`make bench BENCH=pods`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import report

PROGRAMS: dict[str, tuple[str, ...]] = {
    "run": ("--sizes", "3000", "--workers", "1", "--rounds", "3", "--skip-sse"),
    "mission": ("--sizes", "5000,50000", "--corpus", "typical"),
    "scans": (),
    "load": (),
    "redis_memory": (),
    "pg_footprint": (),
    "extraction": (),
    "extractors": (),
    "hostile": (),
}
"""Program and options, in the order they run; `hostile` also takes the pdf.js folder."""
PDFJS_HELP = (
    "pdf.js's test/pdfs folder (`git clone --depth 1 https://github.com/mozilla/pdf.js`); "
    "without it the hostile-PDF benchmark is left out"
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.all", description=__doc__)
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(PROGRAMS)}")
    p.add_argument("--skip", default="", help="comma-separated programs to leave out")
    p.add_argument("--pdfjs", type=Path, default=None, help=PDFJS_HELP)
    return p.parse_args(argv)


def selected(args: argparse.Namespace) -> list[str]:
    only = [x for x in args.only.split(",") if x]
    skip = {x for x in args.skip.split(",") if x}
    unknown = (set(only) | skip) - set(PROGRAMS)
    if unknown:
        raise SystemExit(f"unknown programs: {', '.join(sorted(unknown))}")
    names = [n for n in PROGRAMS if (not only or n in only) and n not in skip]
    if "hostile" in names and args.pdfjs is None:
        print(f"- hostile: left out ({PDFJS_HELP})", flush=True)
        names.remove("hostile")
    return names


def command(name: str, args: argparse.Namespace) -> list[str]:
    extra = [str(args.pdfjs)] if name == "hostile" else []
    return [sys.executable, "-m", f"bench.{name}", *extra, *PROGRAMS[name]]


def run_one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one program; the result files it wrote are the new ones in bench/results."""
    before = set(report.RESULTS.glob("*.json")) if report.RESULTS.exists() else set()
    cmd = command(name, args)
    print(f"- {name}: {' '.join(cmd[1:])}", flush=True)
    started = time.monotonic()
    rc = subprocess.run(cmd, check=False, env=os.environ).returncode
    written = sorted(set(report.RESULTS.glob("*.json")) - before)
    seconds = round(time.monotonic() - started, 1)
    print(f"  {name}: exit {rc} after {seconds}s, wrote {[p.name for p in written]}", flush=True)
    return {
        "command": cmd[1:],
        "exit": rc,
        "seconds": seconds,
        "results": [p.name for p in written],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = report.utc_stamp()
    runs = {name: run_one(name, args) for name in selected(args)}
    report.save(f"all-{stamp}", {"started": stamp, "programs": runs})
    failed = [name for name, r in runs.items() if r["exit"] != 0]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
