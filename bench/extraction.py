"""`python -m bench.extraction`: linking precision and recall on the labelled corpus, by layer."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from bench.report import save, utc_stamp
from pdfqueue.domain.placeholders import PLACEHOLDER_DOMAINS
from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_dev.corpora.labelled import Labelled, User, cached
from pdfqueue_worker.matching import Verdict, choose
from pdfqueue_worker.parse import Extraction, Ocr, read_pdf

NOISY = {"scan_300_noisy", "scan_150_noisy"}


def link(data: bytes, rows: dict[str, UserRow], ocr_pages: int) -> tuple[Verdict, Extraction]:
    """The worker's decision for one file, in this process: read to the first page with a
    candidate, match, read on while nobody matched."""
    domains = frozenset(PLACEHOLDER_DOMAINS)
    how = Ocr(handover=False, budget=ocr_pages)
    page: int | None = 0
    verdict, read = Verdict(), Extraction()
    while page is not None:
        read = read_pdf(data, 50, page, 100_000, how)
        verdict = choose(read.candidates, rows, domains)
        if verdict.user is not None or verdict.ambiguous:
            break
        page = read.next_page
    return verdict, read


def measure(users: list[User], files: list[tuple[Labelled, bytes]]) -> dict[str, Any]:
    rows = {u.email: UserRow(u.id, u.email, None) for u in users}
    link(files[0][1], rows, 2)  # imports and Tesseract's model out of the measurement
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    cpu_ms: dict[str, list[float]] = defaultdict(list)
    ocr_page_ms: list[float] = []
    for label, data in files:
        started = time.process_time()
        verdict, read = link(data, rows, 2)
        spent = (time.process_time() - started) * 1000
        group = "noisy scan" if label.mode in NOISY else label.layer
        cpu_ms[group].append(spent)
        if read.ocr_pages:
            ocr_page_ms.append(spent / read.ocr_pages)
        got = verdict.user.id if verdict.user else None
        c = counts[group]
        c["files"] += 1
        c["with_owner"] += label.owner is not None
        c["linked"] += got is not None
        c["right"] += got is not None and got == label.owner
        c["wrong"] += got is not None and got != label.owner
        c["ambiguous_expected"] += label.ambiguous
        c["ambiguous_found"] += label.ambiguous and verdict.ambiguous
        if got != label.owner:
            c[f"missed:{label.mode}"] += 1
    return {
        group: {
            **c,
            "precision": round(c["right"] / c["linked"], 4) if c["linked"] else None,
            "recall": round(c["right"] / c["with_owner"], 4) if c["with_owner"] else None,
            "cpu_ms_p50": round(statistics.median(cpu_ms[group]), 1),
            "cpu_ms_p95": round(_p95(cpu_ms[group]), 1),
        }
        for group, c in counts.items()
    } | {"ocr_cpu_ms_per_page": _spread(ocr_page_ms)}


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 1),
        "p95": round(_p95(values), 1),
        "max": round(max(values), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.extraction", description=__doc__)
    p.add_argument("--per-mode", type=int, default=20, help="text files per failure mode (20)")
    p.add_argument("--per-scan", type=int, default=8, help="scans per scan style (8)")
    p.add_argument("--seed", type=int, default=14)
    args = p.parse_args(argv)
    users, files = cached(args.per_mode, args.per_scan, args.seed)
    load_before = os.getloadavg()
    started = time.monotonic()
    report = measure(users, files)
    report["wall_s"] = round(time.monotonic() - started, 1)
    report["load_average_before_after"] = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    report["cpus"] = os.cpu_count()
    report["files"] = len(files)
    print(json.dumps(report, indent=2))
    save(f"extraction-{utc_stamp()}", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
