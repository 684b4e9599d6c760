"""Turning run results into the printed table, the ratios against the peer, and targets."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pdfqueue.observability.metrics import STAGES

GOODPUT_TARGET = 3.0
"""pdfqueue must link at least three times as many PDFs per second as the seed peer."""
CPU_TARGET_MS = 3.5
"""CPU per linked PDF, summed over every process, on the typical corpus."""
RESULTS = Path(__file__).resolve().parent / "results"


def utc_stamp() -> str:
    """Now as a run's stamp in names of files and schemas: 20261130T160000Z."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def provenance() -> dict[str, Any]:
    """What a result was measured on: the commit (and whether the tree had changes on top of
    it), the command and when, so a page citing it can say which code the figure describes."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=RESULTS.parent.parent,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    return {
        "commit": git("rev-parse", "HEAD") or None,
        "dirty": bool(changed),
        "command": " ".join(["python -m bench." + Path(sys.argv[0]).stem, *sys.argv[1:]]),
        "saved": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def save(name: str, results: Any) -> Path:
    """Write a run's results, with their provenance, to bench/results/<name>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    if isinstance(results, dict):
        results = {"provenance": provenance(), **results}
    path.write_text(json.dumps(results, indent=2, default=str))
    print(f"results: {path}")
    return path


def _cpu_total(run: dict[str, Any]) -> float:
    """CPU seconds of the measured processes and the backing services during the run."""
    res = run.get("resources", {})
    groups = sum(g["cpu_main_s"] + g["cpu_children_s"] for g in res.get("groups", {}).values())
    return float(groups + sum(res.get("services_cpu_s", {}).values()))


def derive(run: dict[str, Any]) -> dict[str, Any]:
    """Rates (processed/s, and goodput = linked/s: failures are not work) and CPU per link."""
    seconds = run.get("seconds")
    if seconds:
        run["pdfs_per_s"] = round(run.get("processed", 0) / seconds, 1)
        run["goodput"] = round(run.get("linked", 0) / seconds, 1)
    if run.get("resources") and run.get("linked"):
        cpu = _cpu_total(run)
        run["cpu_ms_per_linked"] = round(1000 * cpu / run["linked"], 1)
        run["cores_used"] = round(cpu / max(1e-9, run["resources"]["elapsed_s"]), 2)
    return run


def label(run: dict[str, Any]) -> str:
    density = str(run.get("density", "sparse"))[:11]
    if run["system"] == "pdfqueue":
        return f"{density:<11} pdfqueue {run['workers']}w x {run['extract_processes']}p"
    return f"{density:<11} {run['system']}"


def _peaks(run: dict[str, Any]) -> str:
    groups = run.get("resources", {}).get("groups", {})
    return " ".join(f"{name}={g['peak_rss_mb']:.0f}" for name, g in groups.items())


def _cpu(run: dict[str, Any]) -> str:
    """CPU milliseconds per PDF by component: what a saturated machine divides its cores by."""
    res, n = run.get("resources", {}), max(1, run["files"])
    if not res:
        return ""
    parts = []
    for name, g in res.get("groups", {}).items():
        main, kids = 1000 * g["cpu_main_s"] / n, 1000 * g["cpu_children_s"] / n
        parts.append(f"{name} {main:.1f}+{kids:.1f}" if name.startswith("worker") else
                     f"{name} {main + kids:.1f}")  # fmt: skip
    parts += [f"{k} {1000 * v / n:.1f}" for k, v in res.get("services_cpu_s", {}).items()]
    busy = res["machine_busy_cpu_s"] / max(1e-9, res["elapsed_s"] * (os.cpu_count() or 1))
    parts.append(f"| host busy {100 * busy:.0f}%, others {1000 * res['other_cpu_s'] / n:.1f}")
    return " ".join(parts)


def _stages(run: dict[str, Any]) -> str:
    stages, jobs = run.get("stages", {}), run.get("jobs", {})
    if not stages and not jobs:
        return ""
    line = " ".join(f"{k} {stages[k]['mean_ms']:.0f}" for k in STAGES if k in stages)
    return (
        f"{line}; job {jobs.get('job_mean_ms', 0):.0f} ms, in flight "
        f"{jobs.get('mean_in_flight', 0):.1f}, retried {jobs.get('retried_jobs', 0)}"
    )


def table(runs: list[dict[str, Any]]) -> str:
    nan = float("nan")
    head = (
        f"{'configuration':<31} {'PDFs':>5} {'status':<9} {'sec':>7} {'PDFs/s':>6} "
        f"{'linked/s':>8} {'linked':>6} {'in DB':>6} {'nomatch':>7} {'failed':>6} {'cores':>5} "
        f"{'CPUms/link':>10}  peak RSS MB (process tree)"
    )
    lines = [head, "-" * len(head)]
    for r in runs:
        lines.append(
            f"{label(r):<31} {r['files']:>5} {str(r.get('status', '?'))[:9]:<9} "
            f"{r.get('seconds', nan):>7.2f} {r.get('pdfs_per_s', nan):>6.1f} "
            f"{r.get('goodput', nan):>8.1f} {r.get('linked', 0):>6} {r.get('linked_in_db', 0):>6} "
            f"{r.get('skipped_no_match', 0):>7} {r.get('failed', 0):>6} "
            f"{r.get('cores_used', nan):>5.2f} {r.get('cpu_ms_per_linked', nan):>10.1f}  "
            f"{_peaks(r)}"
        )
    lines.append(
        "(in DB: users with a pdf_url afterwards; fewer than `linked` means some were linked twice)"
    )
    lines += ["", "CPU ms per PDF (workers: event loop+parsers; others: the rest of the host):"]
    lines += [f"  {label(r):<31} {r['files']:>5}  {_cpu(r)}" for r in runs if _cpu(r)]
    lines += ["", "pdfqueue stage means, ms (all workers):"]
    lines += [f"  {label(r):<31} {r['files']:>5}  {_stages(r)}" for r in runs if _stages(r)]
    return "\n".join(lines)


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per corpus, size and worker count, the best pdfqueue configuration against the peer.

    `paired` compares with the peer run made just before it (the same load on a shared
    machine); `vs_best_peer` with the peer's best run of that size (a lower bound).
    """
    out = []
    for density, n in sorted({(str(r.get("density", "sparse")), r["files"]) for r in runs}):
        same = [r for r in runs if str(r.get("density", "sparse")) == density and r["files"] == n]
        out += _ratios(density, n, same)
    return out


def _ratios(density: str, n: int, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`ratios` for one corpus and size: per worker count, the best configuration of each
    round against the peer run just before it, and the median over the rounds."""
    out = []
    peers = [r for r in runs if r["system"] == "seed-node" and r.get("goodput")]
    best_peer = max(peers, key=lambda r: r["goodput"], default=None)
    mine = [r for r in runs if r["system"] == "pdfqueue" and r.get("goodput") is not None]
    for workers in sorted({r["workers"] for r in mine}):
        rounds: dict[int, dict[str, Any]] = {}
        for r in mine:
            if r["workers"] == workers:
                k = r.get("round", 1)
                if k not in rounds or r["goodput"] > rounds[k]["goodput"]:
                    rounds[k] = r
        best = [rounds[k] for k in sorted(rounds)]
        row: dict[str, Any] = {
            "density": density,
            "files": n,
            "workers": workers,
            "extract_processes": _median_of(best, "extract_processes"),
            "rounds": len(best),
            "goodput": _median_of(best, "goodput"),
            "failed_on_clean": max(r.get("failed", 0) for r in best),
            "cpu_ms_per_linked": _median_of(best, "cpu_ms_per_linked"),
        }
        paired = [r for r in best if (r.get("paired_peer") or {}).get("goodput")]
        if paired and best_peer:
            per_round = [round(r["goodput"] / r["paired_peer"]["goodput"], 2) for r in paired]
            peer = [r["paired_peer"] for r in paired]
            row.update(
                peer_goodput=_median_of(peer, "goodput"),
                peer_failed_on_clean=max(p.get("failed") or 0 for p in peer),
                peer_missed_on_clean=max(p.get("skipped_no_match") or 0 for p in peer),
                peer_cpu_ms_per_linked=_median_of(peer, "cpu_ms_per_linked"),
                goodput_ratio=statistics.median(per_round),
                goodput_ratio_rounds=per_round,
                throughput_ratio=statistics.median(
                    round(r["pdfs_per_s"] / r["paired_peer"]["pdfs_per_s"], 2) for r in paired
                ),
                vs_best_peer=round(row["goodput"] / best_peer["goodput"], 2),
            )
            row["met"] = row["goodput_ratio"] >= GOODPUT_TARGET and row["failed_on_clean"] == 0
        if density == "typical":
            cpu = row["cpu_ms_per_linked"]
            row["cpu_met"] = cpu is not None and cpu <= CPU_TARGET_MS
        out.append(row)
    return out


def _median_of(rows: list[dict[str, Any]], key: str) -> Any:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def ratio_lines(rows: list[dict[str, Any]], upload: dict[str, Any] | None) -> str:
    lines = [
        f"Ratios (targets: goodput >= {GOODPUT_TARGET:g}x the peer, 0 failed on clean PDFs; on"
        f" the typical corpus CPU per link <= {CPU_TARGET_MS:g} ms):"
    ]
    for r in rows:
        head = (
            f"  {r['density']:<11} {r['files']:>5} PDFs, {r['workers']} worker(s) x "
            f"{r['extract_processes']}p:"
        )
        if "cpu_met" in r:
            head += f" [CPU {'MET' if r['cpu_met'] else 'MISSED'}]"
        if "goodput_ratio" in r:
            lines.append(
                f"{head} goodput {r['goodput']:.1f} vs peer {r['peer_goodput']:.1f} linked/s "
                f"= {r['goodput_ratio']:.2f}x paired (median of {r['rounds']} rounds: "
                f"{', '.join(f'{x:.2f}' for x in r['goodput_ratio_rounds'])}), "
                f"{r['vs_best_peer']:.2f}x vs the peer's best "
                f"run (throughput {r['throughput_ratio']:.2f}x); CPU ms per link "
                f"{r['cpu_ms_per_linked']} vs {r['peer_cpu_ms_per_linked']}; failed on clean: "
                f"pdfqueue {r['failed_on_clean']}, peer {r['peer_failed_on_clean']} (+"
                f"{r['peer_missed_on_clean']} missed)  [{'MET' if r['met'] else 'MISSED'}]"
            )
        else:
            lines.append(
                f"{head} goodput {r['goodput']:.1f} linked/s, failed on clean "
                f"{r['failed_on_clean']} (no peer run)"
            )
    if upload and "error" in upload:
        lines.append(f"API RSS for a big upload: ERROR {upload['error']}")
    elif upload:
        lines.append(
            f"API RSS for a {upload['upload_mb']:.0f} MB upload: "
            f"idle {upload['idle_mb']:.1f} MB (cold {upload['idle_cold_mb']:.1f}), "
            f"peak {upload['peak_mb']:.1f} MB, delta {upload['delta_mb']:+.1f} MB "
            f"(limit {upload['limit_mb']}), {upload['upload_mb_per_s']:.0f} MB/s  "
            f"[{'MET' if upload['met'] else 'MISSED'}]"
        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    """The docs' table of one `bench.run` result: per corpus, the median over its rounds of
    the peer and of pdfqueue, and the paired ratio (`python -m bench.report FILE`)."""
    rows = [
        "| corpus | parse ms/PDF | peer linked/s (failed, missed) | pdfqueue linked/s (failed) "
        "| goodput ratio, median (rounds) | CPU ms per linked PDF, pdfqueue / peer |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["ratios"]:
        if "goodput_ratio" not in r:
            continue
        cost = results.get("parse_cost", {}).get(r["density"], {}).get("median_ms", "")
        rounds = ", ".join(f"{x:.2f}" for x in r.get("goodput_ratio_rounds", [r["goodput_ratio"]]))
        rows.append(
            f"| {r['density']} | {cost} | {r['peer_goodput']:.1f} "
            f"({r['peer_failed_on_clean']}, {r['peer_missed_on_clean']}) "
            f"| {r['goodput']:.1f} ({r['failed_on_clean']}) "
            f"| **{r['goodput_ratio']:.2f}x** ({rounds}) "
            f"| {r['cpu_ms_per_linked']} / {r['peer_cpu_ms_per_linked']} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
