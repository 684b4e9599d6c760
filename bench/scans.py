"""`python -m bench.scans`: a batch of scanned résumés end to end, every one needing OCR.

Each PDF is one page of a typical résumé (`pdfqueue_dev.corpora.documents`) as a scanner gives
it (`pdfqueue_dev.corpora.labelled.scan`: a 300 dpi grayscale JPEG, about 1.4 MB), naming a
known user. One
batch goes through a fresh API and workers at their default settings (as `bench.pipeline`
starts them); the bench reports its time, its outcomes and reasons, and how many tries the
jobs took. A job of scans needs far more parsing time than a try has, so this is where jobs
used to run out of tries (docs/architecture/extraction.md, "Scans in bulk"); any `failed` here
is a finding.

`--cost` instead reads scans in this process, each by every plan of `ocr.PLANS` in turn
(paired: the same scan, the order turned from one scan to the next), and reports the CPU
time (process time, not wall time: the machine is shared) of each read's page one (its
image, Tesseract and the candidates) at the median and p95, and recall and wrong links on
clean and noisy scans: typical résumés scanned in every style of
`pdfqueue_dev.corpora.labelled`, and the
labelled corpus's scans.

    uv run python -m bench.scans [--n 96] [--dpi 300] [--workers 1]
    uv run python -m bench.scans --cost [--per-style 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import pypdfium2 as pdfium

from bench import corpus
from bench.pipeline import Bench, Deployment, arq_timings
from bench.report import save, utc_stamp
from pdfqueue.domain.models import UserId
from pdfqueue.domain.placeholders import PLACEHOLDER_DOMAINS
from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_dev.corpora.documents import Density, render
from pdfqueue_dev.corpora.labelled import SCAN_STYLES, ScanStyle, cached, scan
from pdfqueue_dev.corpora.samples import CLEAN, Corpus, build_corpus, member_info
from pdfqueue_worker import ocr
from pdfqueue_worker.candidates import Source, page_candidates
from pdfqueue_worker.matching import choose

SEED = 3
NOISY = {"scan_300_noisy", "scan_150_noisy"}
"""The styles past the clean-scan target (as in tests/test_labelled_corpus.py)."""
PLANS: dict[str, ocr.Plan] = {
    "whole_page": ocr.WHOLE_PAGE,
    "region_first": ocr.REGION_FIRST,
    "region_first_whole_bands": ocr.Plan(by_line=False),
    "region_first_200dpi": ocr.Plan(band_dpi=200),
    "region_first_250dpi": ocr.Plan(band_dpi=250),
    "region_first_top_18": ocr.Plan(bands=((0.0, 0.18), (0.9, 1.0))),
    "region_first_psm_auto": ocr.Plan(band_psm=ocr.PSM_AUTO),
    "region_first_invert": ocr.Plan(invert=True),
    "region_first_no_dictionaries": ocr.Plan(dictionaries=False),
}
"""Today's read before the bands, the worker's read, each of its choices undone, and a band
resolution between the two measured."""
Scan = tuple[str, str, int | None, bytes]
"""Corpus, style, owner's user id and the PDF (user ids are per corpus)."""


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


def cost_scans(per_style: int) -> tuple[dict[str, dict[str, UserRow]], list[Scan]]:
    """`per_style` typical résumés in each scan style, and the labelled corpus's scans."""
    planned = build_corpus(per_style * len(SCAN_STYLES), seed=SEED, mix=CLEAN)
    rows = {"typical": {u.email: UserRow(u.id, u.email, None) for u in planned.users}}
    ids = {u.email: u.id for u in planned.users}
    scans: list[Scan] = []
    rng = random.Random(SEED)
    for i, f in enumerate(planned.files):
        name, style = list(SCAN_STYLES.items())[i % len(SCAN_STYLES)]
        pdf = scan(render(f, Density.TYPICAL, SEED), style, rng)
        scans.append(("typical", name, ids.get(f.email or ""), pdf))
    users, files = cached(20, 8, seed=14)  # tests/test_labelled_corpus.py's corpus
    rows["labelled"] = {u.email: UserRow(u.id, u.email, None) for u in users}
    for label, pdf in files:
        if label.layer == "scan":
            scans.append(("labelled", label.mode, label.owner, pdf))
    return rows, scans


def read_once(
    pdf: bytes, plan: ocr.Plan, rows: dict[str, UserRow]
) -> tuple[float, UserId | None, int | None]:
    """CPU ms of one OCR read of page one, the user it links to, and the band it ended at
    (None: the whole page)."""
    document = pdfium.PdfDocument(pdf)
    page = document[0]
    try:
        started = time.process_time()
        text, band = ocr.read(page, None, plan)
        found = page_candidates(text, 0, source=Source.OCR)
        spent = (time.process_time() - started) * 1000
    finally:
        page.close()
        document.close()
    verdict = choose(found, rows, frozenset(PLACEHOLDER_DOMAINS))
    return spent, verdict.user.id if verdict.user else None, band


def cost(per_style: int) -> int:
    """Every plan on every scan, paired; the figures per corpus and per plan."""
    os.environ["OMP_THREAD_LIMIT"] = "1"  # as in the parsing processes
    rows, scans = cost_scans(per_style)
    print(f"scans --cost: {len(scans)} scans x {len(PLANS)} plans", flush=True)
    for plan in PLANS.values():  # the engines' start out of the measurement
        read_once(scans[0][3], plan, rows["typical"])
    names = list(PLANS)
    reads: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for i, (kind, style, owner, pdf) in enumerate(scans):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            spent, got, band = read_once(pdf, PLANS[name], rows[kind])
            group = "noisy" if style in NOISY else "clean"
            reads[name].append(
                {
                    "corpus": kind,
                    "group": group,
                    "style": style,
                    "cpu_ms": spent,
                    "owner": owner,
                    "linked": got,
                    "band": band,
                }
            )
        print(f"{i + 1}/{len(scans)}", end="\r", flush=True)
    summary = {name: summarize(rs) for name, rs in reads.items()}
    for name, by in summary.items():
        for key, fig in by.items():
            print(f"{name:30s} {key:16s} {fig}")
    stamp = utc_stamp()
    save(
        f"scans-cost-{stamp}",
        {
            "started": stamp,
            "per_style": per_style,
            "summary": summary,
            "plans": {n: vars(p) for n, p in PLANS.items()},
            "reads": reads,
        },
    )
    return 0


def summarize(reads: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """CPU ms p50/p95, recall and wrong links per corpus and group (and all scans)."""
    out: dict[str, dict[str, Any]] = {}
    keys = sorted({(r["corpus"], r["group"]) for r in reads})
    for key, part in [("all", reads)] + [
        (f"{c}/{g}", [r for r in reads if (r["corpus"], r["group"]) == (c, g)]) for c, g in keys
    ]:
        cpu = sorted(r["cpu_ms"] for r in part)
        owned = [r for r in part if r["owner"] is not None]
        right = sum(r["linked"] == r["owner"] for r in owned)
        out[key] = {
            "n": len(part),
            "ended_at_a_band": sum(r["band"] is not None for r in part),
            "cpu_ms_p50": round(statistics.median(cpu), 1),
            "cpu_ms_p95": round(cpu[min(len(cpu) - 1, round(0.95 * (len(cpu) - 1)))], 1),
            "recall": round(right / len(owned), 3) if owned else None,
            "wrong": sum(r["linked"] is not None and r["linked"] != r["owner"] for r in part),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scans", description=__doc__)
    p.add_argument("--n", type=int, default=96, help="scanned PDFs in the batch (96)")
    p.add_argument("--dpi", type=int, default=300, help="scan resolution (300)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (1)")
    p.add_argument("--timeout", type=float, default=1800, help="s to wait for COMPLETED")
    p.add_argument("--cost", action="store_true", help="OCR cost and recall of each plan")
    p.add_argument("--per-style", type=int, default=3, help="typical scans per style (3)")
    args = p.parse_args(argv)
    if args.cost:
        return cost(args.per_style)
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
