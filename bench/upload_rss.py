"""API memory for one big upload: peak RSS while streaming ~500 MB, against the idle API."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import corpus
from bench.pipeline import Bench, Deployment
from bench.procs import MB, Sampler

LIMIT_MB = 50


def _idle_rss(sampler: Sampler, seconds: float = 2.0) -> float:
    """Median RSS of the API tree over a quiet moment, in MB."""
    values = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        values.append(sampler.current_rss("api"))
        time.sleep(0.1)
    return statistics.median(values) / MB


def run_upload_rss(bench: Bench, size_mb: int) -> dict[str, Any]:
    """API alone (nothing consumes its queue); the batch is cancelled and its ZIP deleted."""
    path = corpus.CACHE / f"big-{size_mb}mb.zip"
    started = time.monotonic()
    corpus.big_zip(path, size_mb * MB)
    made_s = time.monotonic() - started
    size = path.stat().st_size
    rss_bench = Bench(
        bench.run_id,
        bench.log_dir,
        {
            **bench.env,
            "PDFQUEUE_QUEUE_NAME": bench.env["PDFQUEUE_QUEUE_NAME"] + "-rss",
            "PDFQUEUE_MAX_UPLOAD_BYTES": str(size + 64 * MB),
        },
        bench.bucket,
        bench.batches,
        bench.services,
    )
    try:
        with Deployment(rss_bench, workers=0, extract_processes=1, tag="rss") as dep:
            idle = dep.sampler()
            idle_cold = _idle_rss(idle)
            # A small upload first: the code paths an upload needs are imported and warm.
            _, small = corpus.corpus(300, 1)
            warm = dep.client.upload(small)
            dep.client.cancel(warm["batch_id"])
            bench.batches.append(warm["batch_id"])
            idle_warm = _idle_rss(idle)
            sampler = dep.sampler(interval_s=0.1)
            sampler.start()
            t0 = time.monotonic()
            try:
                created = dep.client.upload(path)
            finally:
                upload_s = time.monotonic() - t0
                sampler.stop()
            bench.batches.append(created["batch_id"])
            dep.client.cancel(created["batch_id"])
            after = _idle_rss(idle, 1.0)
            bench.s3().delete_object(
                Bucket=bench.bucket, Key=f"{bench.prefix}uploads/{created['batch_id']}.zip"
            )
    finally:
        path.unlink(missing_ok=True)
    peak = sampler.peak_mb("api")
    return {
        "upload_mb": round(size / MB, 1),
        "zip_generation_s": round(made_s, 1),
        "upload_s": round(upload_s, 2),
        "upload_mb_per_s": round(size / MB / upload_s, 1),
        "idle_cold_mb": round(idle_cold, 1),
        "idle_mb": round(idle_warm, 1),
        "peak_mb": round(peak, 1),
        "delta_mb": round(peak - idle_warm, 1),
        "delta_vs_cold_mb": round(peak - idle_cold, 1),
        "after_mb": round(after, 1),
        "limit_mb": LIMIT_MB,
        "met": peak - idle_warm <= LIMIT_MB,
        "resources": sampler.report(),
    }
