"""`pdfqueue api`: serve the HTTP API with uvicorn."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("api", help="serve the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from pdfqueue.settings import Settings
    from pdfqueue.telemetry import setup_logging
    from pdfqueue.tracing import setup_tracing
    from pdfqueue_api.app import create_app

    setup_logging()
    settings = Settings()
    setup_tracing("pdfqueue-api", export=settings.export_traces)
    app = create_app(settings)
    uvicorn.run(app, host=args.host, port=args.port, log_config=None, access_log=False)
    return 0
