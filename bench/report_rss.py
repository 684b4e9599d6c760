"""`python -m bench.report_rss`: the per-file report's time and API memory at growing batch sizes.

Finished batches of 5,000 to 200,000 linked files are written straight into PostgreSQL (as the
workers would have left them), then a fresh API streams each one's report, CSV and JSON, while
its RSS is sampled. A report built in memory would grow the API by its size; a streamed one
keeps the same peak whatever the rows.

    uv run python -m bench.report_rss [--sizes 5000,50000,200000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
import uuid
from typing import Any

import asyncpg

from bench import corpus
from bench.pipeline import Bench, Deployment
from bench.procs import MB, Sampler
from bench.report import save, utc_stamp
from pdfqueue.domain.models import BatchStatus

TENANT = "bench"
"""The bench's token belongs to this tenant (see bench.pipeline)."""


async def finished_batch(dsn: str, rows: int) -> str:
    """A COMPLETED batch of `rows` linked files, as the durable record would hold it."""
    batch_id = uuid.uuid4().hex
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO pdfqueue_batches (id, tenant, source_key, status, total_files, processed,"
            " linked, completed_at) VALUES ($1, $2, $3, $4, $5, $5, $5, now())",
            batch_id,
            TENANT,
            f"uploads/{batch_id}.zip",
            BatchStatus.COMPLETED.value,
            rows,
        )
        records = []
        for i in range(rows):
            sha = hashlib.sha256(f"{batch_id}/{i}".encode()).hexdigest()
            name = f"resumes/{i + 1:06d}-Lastname.pdf"
            records.append(
                (batch_id, i, name, "linked", None, i + 1, f"pdfs/{i + 1}/{sha}.pdf", sha)
            )
        await conn.copy_records_to_table(
            "pdfqueue_files",
            records=records,
            columns=[
                "batch_id",
                "idx",
                "name",
                "outcome",
                "reason",
                "user_id",
                "object_key",
                "sha256",
            ],
        )
    finally:
        await conn.close()
    return batch_id


def stream(dep: Deployment, batch_id: str, fmt: str) -> dict[str, Any]:
    """Read the report to the end (nothing kept here) while sampling the API's RSS."""
    sampler = Sampler(0.05)
    sampler.watch("api", dep.api.main_pid)
    before = sampler.current_rss("api")
    sampler.start()
    started, size, lines = time.perf_counter(), 0, 0
    try:
        url = f"/v1/batches/{batch_id}/files"
        with dep.client.http.stream("GET", url, params={"format": fmt}) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                size += len(chunk)
                lines += chunk.count(b"\n")
    finally:
        sampler.stop()
    api = sampler.report()["groups"]["api"]
    return {
        "format": fmt,
        "seconds": round(time.perf_counter() - started, 2),
        "bytes": size,
        "rows": lines - 1 if fmt == "csv" else None,  # a CSV line per file, after the header
        "api_rss_before_mb": round(before / MB, 1),
        "api_peak_rss_mb": api["peak_rss_mb"],
        "api_added_mb": round(api["peak_rss_mb"] - before / MB, 1),
        "api_cpu_s": api["cpu_main_s"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report_rss", description=__doc__)
    p.add_argument("--sizes", default="5000,50000,200000", help="files per batch")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    stamp = utc_stamp()
    bench = Bench.from_environ(f"r{stamp.lower()}", corpus.CACHE / f"logs-report-{stamp}")
    asyncio.run(bench.prepare())
    rows = []
    try:
        with Deployment(bench, 0, 1, "report") as dep:
            for n in sizes:
                batch_id = asyncio.run(finished_batch(bench.database_url, n))
                bench.batches.append(batch_id)
                for fmt in ("csv", "json", "csv"):  # csv twice: the first may warm caches
                    rows.append({"files": n, **stream(dep, batch_id, fmt)})
                    print(f"  {json.dumps(rows[-1])}", flush=True)
    finally:
        asyncio.run(bench.cleanup())
    save(f"report-rss-{stamp}", {"started": stamp, "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
