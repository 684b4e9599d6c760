"""`pdfqueue operator`: the kopf operator, one of its replicas elected leader (process.py)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("operator", help="run the Kubernetes operator")
    p.add_argument("--namespace", action="append", help="watch only these namespaces")
    p.add_argument(
        "--standalone",
        action="store_true",
        help="no leader election: act at once (one replica only, e.g. on a laptop)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """kopf's own runner, not its CLI: the CLI installs kopf's plain, unredacted log format."""
    import asyncio
    import importlib

    from pdfqueue.domain.settings import Settings
    from pdfqueue.observability.logging import setup_logging
    from pdfqueue.runtime.preflight import start_refused
    from pdfqueue_operator import process

    setup_logging()
    importlib.import_module("pdfqueue_operator")  # registers the handlers
    settings = Settings()
    if start_refused(settings, "operator", writes=False):  # a store's certificate: say so, and stop
        return 2
    return asyncio.run(
        process.run(settings, namespaces=args.namespace or (), standalone=args.standalone)
    )
