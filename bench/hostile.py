"""`python -m bench.hostile DIR`: a directory of PDFs through the worker's parsing pool, per
parser: crashes, timeouts, memory-limit hits, errors, peak memory, p50/p95 time, and where the
parsers' addresses differ.

The pool is the worker's own (`Extractor`: forkserver processes, the time limit, the memory
cap, the scrubbed environment), with the worker's default settings. A good adversary is
mozilla/pdf.js's `test/pdfs` (about 970 broken and odd PDFs; those named in `*.link` files are
downloaded by pdf.js's own test runner and are not needed):
`git clone --depth 1 https://github.com/mozilla/pdf.js && python -m bench.hostile pdf.js/test/pdfs`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from pebble import ProcessExpired

from bench.report import save, utc_stamp
from pdfqueue.domain.settings import Settings
from pdfqueue_worker.extractor import Extractor, death_reason
from pdfqueue_worker.parse import ENGINES, Extraction


def probe(
    engine: str, data: bytes, max_pages: int, max_page_chars: int
) -> tuple[Extraction, float, int]:
    """Runs in a parsing process: the worker's read, its CPU ms, and this process's peak
    RSS so far (KiB)."""
    started = time.process_time()
    result = ENGINES[engine](data, max_pages, 0, max_page_chars)
    cpu_ms = (time.process_time() - started) * 1000
    return result, cpu_ms, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def one(extractor: Extractor, engine: str, data: bytes) -> dict[str, Any]:
    """One file as the worker reads it; the outcome is "ok" or the worker's per-file reason."""
    started = time.monotonic()
    future = extractor.pool.schedule(
        probe,
        args=(engine, data, extractor.max_pages, extractor.max_page_chars),
        timeout=extractor.timeout_s,
    )
    out: dict[str, Any] = {}
    try:
        result, cpu_ms, rss_kib = await asyncio.wrap_future(future)
        out = {"outcome": result.reason or "ok", "emails": result.emails, "pages": result.pages}
        out |= {"cpu_ms": cpu_ms, "rss_kib": rss_kib}
    except FutureTimeout:
        out = {"outcome": "timeout"}
    except ProcessExpired as exc:
        out = {"outcome": death_reason(exc.exitcode), "exitcode": exc.exitcode}
    out["wall_ms"] = (time.monotonic() - started) * 1000
    return out


async def run_engine(engine: str, files: list[Path], settings: Settings) -> dict[str, Any]:
    extractor = Extractor.from_settings(settings, engine=engine)
    limit = asyncio.Semaphore(settings.parsing_processes)  # one PDF per parsing process
    per_file: dict[str, dict[str, Any]] = {}

    async def guarded(path: Path) -> None:
        async with limit:
            data = await asyncio.to_thread(path.read_bytes)
            per_file[path.name] = await one(extractor, engine, data)

    started = time.monotonic()
    try:
        await asyncio.gather(*(guarded(p) for p in files))
    finally:
        extractor.close()
    return {"seconds": round(time.monotonic() - started, 1), "files": per_file}


def summary(run: dict[str, Any]) -> dict[str, Any]:
    files = run["files"].values()
    outcomes = Counter(f["outcome"] for f in files)
    cpu = sorted(f["cpu_ms"] for f in files if "cpu_ms" in f)
    wall = sorted(f["wall_ms"] for f in files)
    return {
        "seconds": run["seconds"],
        "outcomes": dict(outcomes.most_common()),
        "crashes": outcomes["parser_crashed"],
        "timeouts": outcomes["timeout"],
        "memory_limit": outcomes["too_large"],
        "peak_rss_mib": round(max((f.get("rss_kib", 0) for f in files), default=0) / 1024, 1),
        "cpu_ms_p50": round(statistics.median(cpu), 2) if cpu else None,
        "cpu_ms_p95": round(cpu[int(len(cpu) * 0.95)], 2) if cpu else None,
        "wall_ms_p50": round(statistics.median(wall), 2),
        "wall_ms_p95": round(wall[int(len(wall) * 0.95)], 2),
        "with_addresses": sum(1 for f in files if f.get("emails")),
    }


def differences(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Files whose outcome or addresses differ between the parsers (the first is the baseline)."""
    (base, a), (other, b) = list(runs.items())[:2]
    out: dict[str, Any] = {}
    for name, x in a["files"].items():
        y = b["files"][name]
        if (x["outcome"], x.get("emails")) != (y["outcome"], y.get("emails")):
            out[name] = {
                base: [x["outcome"], x.get("emails")],
                other: [y["outcome"], y.get("emails")],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__)
    p.add_argument("directory", type=Path, help="PDFs to read (every *.pdf in it, not below)")
    p.add_argument("--engines", default="pypdf,pdfium", help="parsers, baseline first")
    p.add_argument("--processes", type=int, default=2, help="parsing processes (2)")
    args = p.parse_args(argv)
    files = sorted(f for f in args.directory.iterdir() if f.suffix.lower() == ".pdf")
    settings = Settings(extract_processes=args.processes)
    runs = {}
    summaries = {}
    for engine in args.engines.split(","):
        runs[engine] = asyncio.run(run_engine(engine, files, settings))
        summaries[engine] = summary(runs[engine])
        print(f"{engine}: {json.dumps(summaries[engine])}", flush=True)
    diff = differences(runs) if len(runs) > 1 else {}
    print(f"{len(diff)} files differ in outcome or addresses")
    for name, d in list(diff.items())[:40]:
        print(f"  {name}: {d}")
    settings_used = {
        "extract_timeout_s": settings.extract_timeout_s,
        "extract_memory_bytes": settings.extract_memory_bytes,
        "extract_max_pages": settings.extract_max_pages,
        "processes": args.processes,
    }
    out = {"files": len(files), "settings": settings_used, "summary": summaries, "differ": diff}
    save(f"hostile-{utc_stamp()}", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
