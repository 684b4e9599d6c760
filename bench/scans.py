"""`python -m bench.scans`: a batch of scanned résumés end to end, every one needing OCR.

Each PDF is one page of a typical résumé (`bench.documents`) as a scanner gives it
(`bench.labelled.scan`: a 300 dpi grayscale JPEG, about 1.4 MB), naming a known user. One
batch goes through a fresh API and workers at their default settings (as `bench.pipeline`
starts them); the bench reports its time, its outcomes and reasons, and how many tries the
jobs took. A job of scans needs far more parsing time than a try has, so this is where jobs
used to run out of tries (docs/architecture/extraction.md, "Scans in bulk"); any `failed` here
is a finding.

    uv run python -m bench.scans [--n 96] [--dpi 300] [--workers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

from bench import corpus
from bench.documents import Density, render
from bench.labelled import ScanStyle, scan
from bench.pipeline import Bench, Deployment, arq_timings
from bench.report import save, utc_stamp
from pdfqueue_dev.samples import CLEAN, Corpus, build_corpus, member_info

SEED = 3


def scans_zip(n: int, dpi: int) -> tuple[Corpus, Path]:
    """The corpus and its ZIP of scans, cached: the same n and dpi give the same bytes."""
    planned = build_corpus(n, seed=SEED, mix=CLEAN)
    path = corpus.CACHE / f"scans-{n}-{dpi}dpi-seed{SEED}.zip"
    if not path.exists():
        rng = random.Random(SEED)
        tmp = path.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for f in planned.files:
                page = render(f, Density.TYPICAL, SEED)
                zf.writestr(member_info(f.name), scan(page, ScanStyle(dpi=dpi), rng))
        tmp.replace(path)
    return planned, path


async def reasons(database_url: str, batch_id: str) -> dict[str, int]:
    """Outcome (and reason) of every file, counted."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT outcome, reason FROM pdfqueue_files WHERE batch_id = $1", batch_id
        )
    finally:
        await conn.close()
    return dict(Counter(f"{r['outcome']}/{r['reason'] or '-'}" for r in rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scans", description=__doc__)
    p.add_argument("--n", type=int, default=96, help="scanned PDFs in the batch (96)")
    p.add_argument("--dpi", type=int, default=300, help="scan resolution (300)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (1)")
    p.add_argument("--timeout", type=float, default=1800, help="s to wait for COMPLETED")
    args = p.parse_args(argv)
    planned, path = scans_zip(args.n, args.dpi)
    stamp = utc_stamp()
    bench = Bench.from_environ(f"s{stamp.lower()}", corpus.CACHE / f"logs-scans-{stamp}")
    print(
        f"scans {stamp}: {args.n} PDFs, {path.stat().st_size // args.n:,} B each; logs in "
        f"{bench.log_dir}",
        flush=True,
    )
    asyncio.run(bench.prepare())
    try:
        with Deployment(bench, args.workers, 0, f"scans-{args.n}") as dep:
            asyncio.run(corpus.reseed(bench.database_url, bench.schema, planned))
            started = time.monotonic()
            result: dict[str, Any] = dep.batch(path, args.timeout)
            result["jobs"] = arq_timings(bench, result["batch_id"], result["epoch0"])
            result["outcomes"] = asyncio.run(reasons(bench.database_url, result["batch_id"]))
            result["seconds"] = time.monotonic() - started
    finally:
        asyncio.run(bench.cleanup())
    counts = {k: result.get(k) for k in ("status", "processed", "linked", "failed")}
    print(f"{counts} in {result['seconds']:.1f} s; outcomes {result['outcomes']}")
    print(f"jobs: {result['jobs']}")
    save(f"scans-{stamp}", {"started": stamp, "options": vars(args), "run": result})
    return 1 if result.get("failed") or result.get("status") != "COMPLETED" else 0


if __name__ == "__main__":
    sys.exit(main())
