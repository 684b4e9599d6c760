"""`python -m bench.pods`: the mission on real pods, the operator scaling the workers from 0.

The chart is installed on the real node of `tools/kube.sh up DIR --real-node` (kubelet,
containerd, runc; the images of tools/images.sh) with its own Redis, PostgreSQL and S3 pods,
the worker Deployment at 0 replicas. One ZIP of the bench's typical corpus goes in through
the API's Service; a watcher records, every tick, the Deployment's desired and ready
replicas, the backlog as the operator counts it, the batch's progress, and each pod's cgroup
(CPU, memory, the kernel's peak) and OOMKilled status, until the batch is COMPLETED and the
workers are back at 0. Then the same ZIP runs on local processes (`bench.mission`, on the
bench's services) for the goodput comparison; `--rounds N` pairs the two N times.

    make bench BENCH=pods BENCH_ARGS="--files 50000"
    uv run python -m bench.pods [--files 3000] [--rounds 1] [--max-workers 2] [--no-local]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import mission
from bench.corpus import CACHE
from bench.pipeline import Bench, Deployment
from bench.pods.cpugroup import weighted_like_pods
from bench.pods.plot import plot
from bench.pods.release import Release, node_cpu_s, start_node, stop_node
from bench.pods.report import compare, table
from bench.pods.stats import pods_report
from bench.pods.watch import KubeAccess, Watcher
from bench.procs import noise, with_noise
from bench.report import save, utc_stamp
from pdfqueue.cli.client import Client


def pods_run(
    release: Release, path: Path, planned: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """One batch on the release: upload, watch to COMPLETED and back to zero workers."""
    release.wait_workers_gone(timeout_s=600)
    asyncio.run(release.seed(planned))
    watcher = Watcher(KubeAccess.from_node(release.node_dir), release.target(), args.every_s)
    watcher.t0 = time.monotonic()
    watcher.start()
    try:
        time.sleep(2 * args.every_s)  # the baseline tick: CPU the running pods had already used
        watcher.t0 = t0 = time.monotonic()
        machine, node_cpu = noise(), node_cpu_s(release.node_dir)
        with Client(release.api_url, release.token, timeout_s=600) as client:
            watcher.batch_id = client.upload(path)["batch_id"]
        watcher.timeline.uploaded_s = round(time.monotonic() - t0, 2)
        timeout = 300 + args.timeout_per_pdf * args.files
        if not watcher.completed.wait(timeout):
            raise SystemExit(f"batch {watcher.batch_id} not terminal in {timeout:.0f}s")
        seconds = time.monotonic() - t0
        machine = with_noise(machine, seconds)
        machine["node_processes_cpu_s"] = round(node_cpu_s(release.node_dir) - node_cpu, 2)
        watcher.zero.wait(args.zero_timeout_s)
    finally:
        watcher.stop()
    final = watcher.final or {}
    pods = pods_report(list(watcher.records.values()), int(final.get("linked", 0)))
    return {
        "status": final.get("status"),
        "batch": final,
        "seconds": round(seconds, 2),
        "goodput": round(int(final.get("linked", 0)) / seconds, 1),
        "machine": machine,
        "scaling": watcher.timeline.summary(),
        **pods,
        "timeline": watcher.timeline.to_json(),
        "watch_errors": watcher.errors[:20],
    }


def local_run(path: Path, args: argparse.Namespace, stamp: str, rnd: int) -> dict[str, Any]:
    """The same ZIP on local processes (the mission's deployment, on the bench's services)."""
    margs = mission.parse_args(
        [
            "--sizes",
            str(args.files),
            "--corpus",
            args.corpus,
            "--seed",
            str(args.seed),
            "--workers",
            str(args.max_workers),
            "--idle-s",
            "2",
        ]
    )
    bench = Bench.from_environ(f"p{stamp.lower()}{rnd}", CACHE / f"logs-pods-{stamp}")
    asyncio.run(bench.prepare())
    started, deployment_machine = time.monotonic(), noise()
    group: dict[str, Any] = {}
    try:
        with contextlib.ExitStack() as stack:
            adopt = None
            if args.local_cgroup:
                cgroup = stack.enter_context(weighted_like_pods(f"pdfqueue-bench-{stamp}"))
                group = {"path": str(cgroup.path), "weight": cgroup.weight}

                def adopt(dep: Deployment) -> None:
                    """The services first, then the API and workers with their children."""
                    cgroup.adopt([*bench.services.values(), *(c.pid for c in dep.children)])

            m = mission.run_size(bench, margs, args.files, started=adopt)
    finally:
        asyncio.run(bench.cleanup())
    per, run = m["per_pdf"], m["run"]
    cpu = per["worker_cpu_ms"] + per["api_cpu_ms"] + sum(per["services_cpu_ms"].values())
    first = run.get("first_processed_s")
    return {
        "status": per["status"],
        "seconds": per["seconds"],
        "goodput": per["goodput"],
        "upload_s": run["upload_s"],
        "first_processed_s": first,
        "first_to_last_pdf_s": None if first is None else round(run["seconds"] - first, 2),
        "workers": margs.workers,
        "extract_processes": m["extract_processes"],
        "worker_cpu_ms": per["worker_cpu_ms"],
        "api_cpu_ms": per["api_cpu_ms"],
        "services_cpu_ms": per["services_cpu_ms"],
        "worker_peak_rss_mb": per["worker_peak_rss_mb"],
        "api_peak_rss_mb": per["api_peak_rss_mb"],
        "cpu_ms_per_pdf": round(cpu, 3),
        "machine": run["machine"],
        "cpu_group": group or None,
        # the mission's whole deployment: start, warm-up, batch, report
        "machine_deployment": with_noise(deployment_machine, time.monotonic() - started),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.pods", description=__doc__)
    p.add_argument("--files", type=int, default=50000, help="PDFs in the batch (50000)")
    p.add_argument("--corpus", choices=mission.CORPORA, default="typical", help="(typical)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=1, help="paired pods/local rounds (1)")
    p.add_argument("--max-workers", type=int, default=2, help="operator's max; local workers (2)")
    p.add_argument("--no-local", action="store_true", help="pods only, no local comparison")
    p.add_argument("--every-s", type=float, default=0.5, help="watch interval (0.5 s)")
    p.add_argument("--timeout-per-pdf", type=float, default=0.05, help="s on top of 300 (0.05)")
    p.add_argument("--zero-timeout-s", type=float, default=300, help="wait for 0 workers (300)")
    p.add_argument("--keep-node", action="store_true", help="leave the real node running")
    p.add_argument(
        "--no-local-cgroup",
        dest="local_cgroup",
        action="store_false",
        help="leave the local processes in the root CPU group (default: one group weighted "
        "as kubepods, see bench/pods/cpugroup.py)",
    )
    p.add_argument(
        "--node-dir",
        type=Path,
        default=Path(os.environ.get("PDFQUEUE_PODS_DIR", ".state/kube-real")),
        help="the real node's state ($PDFQUEUE_PODS_DIR or .state/kube-real)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = utc_stamp()
    planned, path = mission.load_corpus(args.corpus, args.files, args.seed)
    print(f"pods {stamp}: {args.files} {args.corpus} PDFs ({path.stat().st_size >> 20} MiB)")
    rounds: list[dict[str, Any]] = []
    start_node(args.node_dir)
    try:
        for rnd in range(args.rounds):
            row: dict[str, Any] = {}
            # odd rounds run local processes first: drift in the machine's load cancels out
            order = ["pods", "local"] if rnd % 2 == 0 else ["local", "pods"]
            for side in order:
                if side == "local" and args.no_local:
                    continue
                print(f"- round {rnd + 1}: {side} ...", flush=True)
                if side == "local":
                    row["local"] = local_run(path, args, stamp, rnd)
                    continue
                with Release.install(args.node_dir, args.max_workers) as release:
                    row["pods"] = pods_run(release, path, planned, args)
                    print(f"  {row['pods']['status']} in {row['pods']['seconds']} s", flush=True)
                    row["release"] = release.describe()
            row["order"] = [s for s in order if s in row]
            row["comparison"] = compare(row)
            rounds.append(row)
    finally:
        if not args.keep_node:
            stop_node(args.node_dir)
    ratios = [r["comparison"]["pods_over_local_goodput"] for r in rounds if r["comparison"]]
    out = {
        "started": stamp,
        "host": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load": os.getloadavg(),
        },
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "rounds": rounds,
        "median_pods_over_local_goodput": round(statistics.median(ratios), 3) if ratios else None,
    }
    print(table(out))
    saved = save(f"pods-{stamp}", out)
    png = plot_round(rounds[-1], saved.with_suffix(".png"), args)
    print(f"timeline: {png}")
    return 0


def plot_round(row: dict[str, Any], path: Path, args: argparse.Namespace) -> Path:
    from bench.pods.stats import Timeline

    timeline = Timeline.from_json(row["pods"]["timeline"])
    title = (
        f"{args.files:,} {args.corpus} PDFs on real pods, operator scaling 0 → "
        f"{args.max_workers} → 0 ({row['pods']['seconds']:.0f} s to COMPLETED)"
    )
    return plot(timeline, path, title)


if __name__ == "__main__":
    sys.exit(main())
