"""`pdfqueue worker`: run an arq worker for the pdfqueue queue."""

from __future__ import annotations

import argparse
from typing import Any

from pdfqueue.domain.settings import Settings
from pdfqueue.observability.logging import setup_logging


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("worker", help="run a worker (arq)")
    p.add_argument("--concurrency", type=int, help="jobs at once (PDFQUEUE_WORKER_MAX_JOBS)")
    p.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    import uvloop

    from pdfqueue.observability import metrics
    from pdfqueue.observability.tracing import setup_tracing
    from pdfqueue.runtime.preflight import start_refused
    from pdfqueue_worker.app import build_worker, supervise

    setup_logging()
    settings = Settings()
    if args.concurrency:
        settings = settings.model_copy(update={"worker_max_jobs": args.concurrency})
    if start_refused(settings, "worker", users=True):  # a certificate, the users table
        return 2
    setup_tracing("pdfqueue-worker", export=settings.export_traces)
    metrics.register("worker")
    metrics.serve(settings.metrics_port)
    # libuv's event loop, as the API's through uvicorn: in paired runs the worker's own CPU
    # per PDF went down by a tenth and goodput up by 4%
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return supervise(lambda: build_worker(settings, burst=args.burst))
