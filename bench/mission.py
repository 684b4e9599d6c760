"""`python -m bench.mission`: the mission's upper bound, one big batch end to end on this machine.

For each size (5,000 and 50,000 PDFs by default) a fresh API and workers (as `bench.pipeline`
starts them) take ONE batch: time to COMPLETED, goodput, peak RSS of the API and of each
worker, Redis memory before, at peak, after, and once the batch's keys are gone (what their
TTL does), status-read latency sampled while it runs, the time and API memory to stream its
CSV report, and what the stores did per PDF (`bench.store_costs`). Per-PDF figures of the sizes
are compared at the end: none should grow with the batch.

    uv run python -m bench.mission [--sizes 5000,50000] [--workers 2] [--corpus sparse]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis

from bench import corpus, readdressed, store_costs
from bench.pipeline import Bench, Deployment, _metrics, _stage_means, arq_timings
from bench.procs import MB, Sampler, noise, with_noise
from bench.report import save, utc_stamp
from bench.report_rss import stream
from pdfqueue.domain import keys
from pdfqueue.domain.models import TERMINAL
from pdfqueue_dev.corpora.samples import Corpus

CORPORA = ("sparse", "typical", "long", "libreoffice", "ghostscript")
COMPARED = (
    "seconds_per_1000",
    "worker_cpu_ms",
    "api_cpu_ms",
    "redis_peak_bytes",
    "redis_calls",
    "redis_net_in_bytes",
    "pg_transactions",
    "pg_wal_bytes",
    "report_us",
)


def load_corpus(name: str, n: int, seed: int) -> tuple[Corpus, Path]:
    """`sparse`: the sample résumés (re-addressed); the denser ones come from
    pdfqueue_dev.corpora.documents."""
    if name == "sparse":
        return readdressed.sparse(n, seed)
    from pdfqueue_dev.corpora.documents import Density

    return corpus.corpus(n, seed, Density(name))


def follow(
    dep: Deployment, sampler: Sampler, path: Path, timeout_s: float, every_s: float
) -> dict[str, Any]:
    """Upload, then read the status every `every_s` until terminal, timing each read."""
    t0, epoch0, machine = time.monotonic(), time.time(), noise()
    batch_id = dep.client.upload(path)["batch_id"]
    uploaded = time.monotonic() - t0
    api_uploaded = sampler.groups["api"].peak_rss
    dep.bench.batches.append(batch_id)
    reads: list[float] = []
    status: dict[str, Any] = {"status": "?"}
    first_processed: float | None = None
    while time.monotonic() < t0 + timeout_s:
        started = time.perf_counter()
        status = dep.client.status(batch_id)
        reads.append(time.perf_counter() - started)
        if first_processed is None and status.get("processed"):
            first_processed = time.monotonic() - t0
        if status["status"] in TERMINAL:
            break
        time.sleep(every_s)
    else:
        status = {**status, "status": f"TIMEOUT({status['status']})"}
    reads.sort()
    return {
        **status,
        "seconds": round(time.monotonic() - t0, 2),
        "machine": with_noise(machine, time.monotonic() - t0),
        "upload_s": round(uploaded, 2),
        "first_processed_s": None if first_processed is None else round(first_processed, 2),
        "api_peak_rss_mb_by_upload_end": round(api_uploaded / MB, 1),
        "epoch0": epoch0,
        "status_reads": {
            "count": len(reads),
            "p50_ms": round(1000 * statistics.median(reads), 1),
            "p95_ms": round(1000 * reads[int(0.95 * (len(reads) - 1))], 1),
            "max_ms": round(1000 * reads[-1], 1),
        },
    }


def key_lifetimes(r: Redis, batch_id: str) -> dict[str, Any]:
    """What the finished batch leaves in Redis, how big, and for how long (TTL)."""
    results = list(r.scan_iter(match=f"arq:result:*:{batch_id}*", count=5000))
    sample = results[:100]
    mean = statistics.fmean(store_costs.memory_usage(r, k) for k in sample) if sample else 0.0
    others = [
        k
        for k in r.scan_iter(match=f"*{batch_id}*", count=5000)
        if k.decode() not in {keys.batch(batch_id), keys.outcomes(batch_id)}
        and not k.startswith(b"arq:result:")
    ]
    return {
        "batch_hash": {
            "ttl_s": r.ttl(keys.batch(batch_id)),
            "bytes": r.memory_usage(keys.batch(batch_id)),
        },
        "outcomes_hash": {
            "ttl_s": r.ttl(keys.outcomes(batch_id)),
            "bytes": r.memory_usage(keys.outcomes(batch_id), samples=0),
        },
        "arq_results": {
            "count": len(results),
            "ttl_s": r.ttl(results[0]) if results else None,
            "mean_bytes": round(mean),
            "total_bytes": round(mean * len(results)),
        },
        "other_keys": sorted(k.decode() for k in others)[:20],
    }


def idle_rates(r: Redis, dsn: str, seconds: float) -> dict[str, Any]:
    """What the running, idle deployment costs the stores per second (workers polling)."""
    store_costs.settle_stats()
    before = store_costs.snapshot(r, dsn)
    time.sleep(seconds)
    store_costs.settle_stats()
    d = store_costs.delta(before, store_costs.snapshot(r, dsn))
    span = seconds + store_costs.STATS_FLUSH_S
    return {
        "redis_calls": round(sum(d["redis"]["calls"].values()) / span, 1),
        "redis_calls_by_command": {k: round(v / span, 1) for k, v in d["redis"]["calls"].items()},
        "redis_cpu_ms": round(1000 * d["redis"]["cpu_s"] / span, 2),
        "pg_transactions": round(d["postgres"]["xact_commit"] / span, 2),
    }


def measure(dep: Deployment, path: Path, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """The one big batch, then its report, then its keys' memory; everything per PDF too."""
    bench = dep.bench
    r = bench.redis()
    idle = idle_rates(r, bench.database_url, args.idle_s)
    before = store_costs.snapshot(r, bench.database_url)
    metrics_before = [_metrics(p) for p in dep.metrics_ports]
    sampler = dep.sampler(0.5).start()
    peak = store_costs.MemoryPeak(bench.env["PDFQUEUE_REDIS_URL"]).start()
    try:
        run = follow(dep, sampler, path, 300 + args.timeout_per_pdf * n, args.status_every_s)
    finally:
        sampler.stop()
        peak.stop()
    after = {"redis": store_costs.redis_counters(r)}  # before idle polls add to it
    store_costs.settle_stats()
    after["postgres"] = store_costs.pg_counters(bench.database_url)
    stages = _stage_means(metrics_before, [_metrics(p) for p in dep.metrics_ports])
    batch_id = run["batch_id"] = bench.batches[-1]
    lifetimes = key_lifetimes(r, batch_id)
    report = stream(dep, batch_id, "csv")  # the CSV report, streamed while RSS is sampled
    jobs = arq_timings(bench, batch_id, run["epoch0"])  # deletes the batch's arq results
    r.delete(keys.batch(batch_id), keys.outcomes(batch_id))
    gone = int(store_costs.info(r, "memory")["used_memory"])
    linked_db, _ = asyncio.run(corpus.linked_in_db(bench.database_url, bench.schema))
    costs = store_costs.delta(before, after)
    return {
        "files": n,
        "idle_per_s": idle,
        "run": run,
        "linked_in_db": linked_db,
        "stages": stages,
        "jobs": jobs,
        "resources": sampler.report(),
        "redis_memory": {
            "before": before["redis"]["used_memory"],
            "peak": peak.peak_bytes,
            "peak_keys": peak.peak_keys,
            "after_completed": after["redis"]["used_memory"],
            "after_keys_expired": gone,
            "keys": lifetimes,
        },
        "report": report,
        "stores": costs,
    }


def derive(m: dict[str, Any]) -> dict[str, Any]:
    """Per-PDF figures of one measurement (what must not grow with the batch)."""
    n, run, res = m["files"], m["run"], m["resources"]
    groups = res["groups"]
    workers = [g for name, g in groups.items() if name.startswith("worker")]

    def cpu(g: dict[str, Any]) -> float:
        return float(g["cpu_main_s"] + g["cpu_children_s"])

    stages = m["stages"]
    s3 = stages.get("read", {}).get("count", 0) + stages.get("store", {}).get("count", 0)
    mem = m["redis_memory"]
    idle_redis_cpu_s = m["idle_per_s"]["redis_cpu_ms"] * run["seconds"] / 1000
    return {
        "status": run["status"],
        "seconds": run["seconds"],
        "goodput": round(run["linked"] / run["seconds"], 1),
        "seconds_per_1000": round(1000 * run["seconds"] / n, 2),
        "api_peak_rss_mb": groups["api"]["peak_rss_mb"],
        "worker_peak_rss_mb": [w["peak_rss_mb"] for w in workers],
        "worker_cpu_ms": round(1000 * sum(cpu(w) for w in workers) / n, 2),
        "api_cpu_ms": round(1000 * cpu(groups["api"]) / n, 3),
        "services_cpu_ms": {k: round(1000 * v / n, 3) for k, v in res["services_cpu_s"].items()},
        "redis_peak_bytes": round((mem["peak"] - mem["before"]) / n),
        "redis_left_after_expiry_bytes": mem["after_keys_expired"] - mem["before"],
        "status_p50_ms": run["status_reads"]["p50_ms"],
        "status_p95_ms": run["status_reads"]["p95_ms"],
        "report_s": m["report"]["seconds"],
        "report_us": round(1e6 * m["report"]["seconds"] / n, 1),
        "report_api_peak_rss_mb": m["report"]["api_peak_rss_mb"],
        "s3_requests": round(s3 / n, 3),
        **store_costs.per_pdf(m["stores"], n),
        "redis_cpu_usec_process_less_idle": round(
            1e6 * (m["stores"]["redis"]["cpu_s"] - idle_redis_cpu_s) / n, 1
        ),
    }


def compare(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Largest over smallest batch, per PDF: about 1 when nothing grows faster than linearly."""
    if len(rows) < 2:
        return {}
    small, big = rows[0]["per_pdf"], rows[-1]["per_pdf"]
    return {k: round(big[k] / small[k], 2) for k in COMPARED if small.get(k)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.mission", description=__doc__)
    p.add_argument("--sizes", default="5000,50000", help="PDFs per batch (5000,50000)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    p.add_argument("--extract-procs", type=int, default=0, help="per worker; 0: cores / workers")
    p.add_argument("--corpus", choices=CORPORA, default="sparse", help="density (sparse)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--idle-s", type=float, default=10, help="idle baseline before a batch (10)")
    p.add_argument("--status-every-s", type=float, default=0.25, help="status reads (0.25 s)")
    p.add_argument("--timeout-per-pdf", type=float, default=0.3, help="s on top of 300 (0.3)")
    args = p.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    return args


def run_size(
    bench: Bench,
    args: argparse.Namespace,
    n: int,
    started: Callable[[Deployment], None] | None = None,
) -> dict[str, Any]:
    """One batch of `n` on a fresh deployment; `started(dep)` runs once its processes are up,
    before the warm-up."""
    planned, path = load_corpus(args.corpus, n, args.seed)
    procs = args.extract_procs or max(1, (os.cpu_count() or 1) // args.workers)
    with Deployment(bench, args.workers, procs, f"mission-{n}") as dep:
        if started is not None:
            started(dep)
        dep.warm_up()
        asyncio.run(corpus.reseed(bench.database_url, bench.schema, planned))
        m = measure(dep, path, n, args)
    m.update(workers=args.workers, extract_processes=procs, corpus=args.corpus)
    m["per_pdf"] = derive(m)
    print(f"  {n} PDFs: {json.dumps(m['per_pdf'])}", flush=True)
    return m


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = utc_stamp()
    bench = Bench.from_environ(f"m{stamp.lower()}", corpus.CACHE / f"logs-mission-{stamp}")
    print(f"mission {stamp}: logs in {bench.log_dir}", flush=True)
    asyncio.run(bench.prepare())
    rows = []
    try:
        for n in args.sizes:
            print(f"- one batch of {n} {args.corpus} PDFs ...", flush=True)
            rows.append(run_size(bench, args, n))
    finally:
        asyncio.run(bench.cleanup())
    load = os.getloadavg()
    out = {
        "started": stamp,
        "host": {"cores": os.cpu_count(), "python": platform.python_version(), "load": load},
        "options": vars(args),
        "runs": rows,
        "growth_largest_over_smallest": compare(rows),
    }
    print(f"growth per PDF, largest/smallest batch: {out['growth_largest_over_smallest']}")
    save(f"mission-{stamp}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
