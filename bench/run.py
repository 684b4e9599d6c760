"""`python -m bench.run`: pdfqueue vs the seed peer (goodput, RSS) and API RSS on a big upload."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time
import traceback
from typing import Any

from bench import corpus, report
from bench.peer import run_peer
from bench.pipeline import Bench, run_config
from bench.procs import filesystem
from bench.sse import line as sse_line
from bench.sse import run_sse
from bench.upload_rss import run_upload_rss
from pdfqueue_dev.corpora.documents import Density

PAIR_KEYS = ("goodput", "pdfs_per_s", "failed", "skipped_no_match", "cpu_ms_per_linked")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    p.add_argument("--sizes", type=_ints, default=[300, 3000], help="PDFs per batch (300,3000)")
    p.add_argument(
        "--densities",
        type=_densities,
        default=list(Density),
        help="corpora: sparse, typical (1-2 dense pages), long (3-5), libreoffice (1-3 pages"
        " converted by LibreOffice), ghostscript (typical, written by ps2pdf); all by default",
    )
    p.add_argument("--workers", type=_ints, default=[1, 2], help="worker processes (1,2)")
    p.add_argument(
        "--extract-procs",
        default="auto",
        help="PDFQUEUE_EXTRACT_PROCESSES per worker to try, e.g. 1,2; "
        "auto = cores // workers (total parsing processes = cores)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="paired rounds over every corpus; ratios are the median of the rounds (1)",
    )
    p.add_argument("--skip-peer", action="store_true", help="do not run the seed peer")
    p.add_argument("--skip-upload-rss", action="store_true", help="skip the big-upload RSS test")
    p.add_argument("--upload-mb", type=int, default=500, help="size of the big upload (500)")
    p.add_argument("--seed", type=int, default=1, help="corpus seed (1)")
    p.add_argument("--sse-clients", type=int, default=500, help="event streams (500)")
    p.add_argument("--sse-files", type=int, default=3000, help="PDFs of the SSE batch (3000)")
    p.add_argument("--skip-sse", action="store_true", help="skip the event-stream test")
    p.add_argument("--only-sse", action="store_true", help="run only the event-stream test")
    p.add_argument(
        "--timeout-per-pdf", type=float, default=0.5, help="s per PDF on top of 120 s (0.5)"
    )
    return p.parse_args(argv)


def _densities(text: str) -> list[Density]:
    return [Density(x.strip()) for x in text.split(",") if x.strip()]


def procs_for(workers: int, spec: str) -> list[int]:
    if spec == "auto":
        return [max(1, (os.cpu_count() or 1) // workers)]
    return _ints(spec)


def _guarded(what: str, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run one measurement; a failure is recorded and the bench goes on."""
    print(f"- {what} ...", flush=True)
    started = time.monotonic()
    try:
        result: dict[str, Any] = fn(*args, **kwargs)
    except Exception as exc:
        traceback.print_exc()
        return {"error": f"{type(exc).__name__}: {exc}"}
    print(f"  done in {time.monotonic() - started:.0f}s: {_brief(result)}", flush=True)
    return result


def _brief(r: dict[str, Any]) -> str:
    if "delta_mb" in r:
        return f"API peak {r['peak_mb']} MB, idle {r['idle_mb']} MB"
    report.derive(r)
    return (
        f"{r.get('status')} in {r.get('seconds', 0):.2f}s, linked {r.get('linked')}, "
        f"failed {r.get('failed')}, {r.get('goodput')} linked/s"
    )


def paired_runs(
    bench: Bench, args: argparse.Namespace, n: int, config: tuple[int, int], density: Density
) -> list[dict[str, Any]]:
    """The peer, then pdfqueue right after it: load on a shared machine drifts, a pair shares it."""
    workers, procs = config
    timeout_s = 120 + args.timeout_per_pdf * n
    out = []
    peer: dict[str, Any] = {}
    if not args.skip_peer:
        what = f"seed peer, {n} {density} PDFs"
        peer = _guarded(what, run_peer, bench, n, args.seed, timeout_s, density)
        out.append(report.derive({"system": "seed-node", "files": n, "density": density, **peer}))
    what = f"pdfqueue {workers} worker(s) x {procs} parsing processes, {n} {density} PDFs"
    mine = _guarded(
        what,
        run_config,
        bench,
        workers,
        procs,
        n,
        seed=args.seed,
        timeout_s=timeout_s,
        density=density,
    )
    mine = {
        "system": "pdfqueue",
        "files": n,
        "density": density,
        "workers": workers,
        "extract_processes": procs,
        **mine,
    }
    if peer:
        mine["paired_peer"] = {k: out[0].get(k) for k in PAIR_KEYS}
    out.append(report.derive(mine))
    return out


def prepare_corpora(args: argparse.Namespace, sizes: list[int]) -> dict[str, Any]:
    """Build (or find cached) every corpus of the run; the parse cost of each density."""
    parse = {}
    for density in args.densities:
        for n in sizes:
            corpus.corpus(n, args.seed, density)
        planned = corpus.corpus(args.sizes[0], args.seed, density)[0]
        parse[density.value] = corpus.parse_cost_ms(planned, args.seed, density)
        print(f"parse cost per clean {density} PDF, one core: {parse[density.value]}")
    return parse


def s3_objects() -> dict[str, str]:
    """Where the S3 server keeps the objects, and on what: its CPU per PUT depends on it."""
    path = os.environ.get("PDFQUEUE_S3_DATA", "")
    return {"path": path, "filesystem": filesystem(path) if path else "unknown"}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [] if args.only_sse else args.sizes
    args.skip_upload_rss = args.skip_upload_rss or args.only_sse
    stamp = report.utc_stamp()
    bench = Bench.from_environ(stamp.lower(), corpus.CACHE / f"logs-{stamp}")
    objects = s3_objects()
    print(
        f"bench {stamp}: logs in {bench.log_dir}, objects under s3://{bench.bucket}/{bench.prefix}"
        f" (the S3 server's files on {objects['filesystem']})"
    )
    asyncio.run(bench.prepare())
    parse = prepare_corpora(args, sizes)

    runs: list[dict[str, Any]] = []
    upload: dict[str, Any] | None = None
    sse: dict[str, Any] | None = None
    try:
        if not args.skip_sse:
            sse = _guarded(
                f"SSE, {args.sse_clients} streams",
                run_sse,
                bench,
                args.sse_clients,
                args.sse_files,
                args.seed,
            )
        # round after round over every corpus, so that a drift in the machine's load
        # lands on every corpus alike rather than on whichever ran last
        for round_ in range(1, args.rounds + 1):
            for density in args.densities:
                for n in sizes:
                    for w in args.workers:
                        for p in procs_for(w, args.extract_procs):
                            pairs = paired_runs(bench, args, n, (w, p), density)
                            runs += [{**r, "round": round_} for r in pairs]
        if not args.skip_upload_rss:
            upload = _guarded(
                f"API RSS, {args.upload_mb} MB upload", run_upload_rss, bench, args.upload_mb
            )
    finally:
        print("- cleaning up (objects under the bench prefix, bench batches, bench queues)")
        try:
            asyncio.run(bench.cleanup())
        except Exception as exc:
            print(f"  clean-up failed: {exc!r}")

    for r in runs:
        report.derive(r)
    ratio_rows = report.ratios(runs)
    print()
    print(report.table(runs))
    print()
    print(report.ratio_lines(ratio_rows, upload))
    if sse and "clients" in sse:
        print(sse_line(sse))
    for density, cost in parse.items():
        ceiling = (os.cpu_count() or 1) * 1000 / cost["mean_ms"]
        print(
            f"{density}: the parser alone takes {cost['mean_ms']} ms CPU per PDF (pypdf "
            f"{cost['pypdf_mean_ms']}), so parsing caps {ceiling:.0f} PDFs/s on "
            f"{os.cpu_count()} idle cores"
        )
    out = {
        "started": stamp,
        "host": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "s3_objects": objects,
        },
        "options": vars(args),
        "parse_cost": parse,
        "runs": runs,
        "ratios": ratio_rows,
        "upload_rss": upload,
        "sse": sse,
    }
    print()
    report.save(stamp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
