"""`pdfqueue api`: serve the HTTP API with uvicorn."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("api", help="serve the HTTP API")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from pdfqueue.domain.errors import ConfigurationError
    from pdfqueue.domain.settings import Settings
    from pdfqueue.observability.logging import setup_logging
    from pdfqueue.observability.tracing import setup_tracing
    from pdfqueue.runtime.preflight import start_refused
    from pdfqueue_api.app import create_app
    from pdfqueue_api.protocol import HttpLimits, protocol_class

    setup_logging()
    try:
        settings = Settings()
        app = create_app(settings)
    except (ValidationError, ConfigurationError) as exc:
        # Settings errors never carry a value (see Settings.model_config): safe to print.
        print(f"pdfqueue api: refusing to start: {exc}", file=sys.stderr)
        return 2
    if start_refused(settings, "api"):  # a store's certificate: say so, and stop
        return 2
    setup_tracing("pdfqueue-api", export=settings.export_traces)
    limits = HttpLimits.from_settings(settings)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        # uvicorn's httptools protocol reads a head of any size for any time: ours bounds
        # every phase of a connection
        http=protocol_class(limits),
        limit_concurrency=limits.max_connections,
        # uvicorn's own keep-alive timer must not close idle connections before ours does
        timeout_keep_alive=math.ceil(limits.idle_timeout_s),
        ws="none",  # no WebSocket route: no upgrade path to attack
    )
    return 0
