"""`pdfqueue operator`: run the kopf operator (same as `kopf run -m pdfqueue_operator`)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("operator", help="run the Kubernetes operator")
    p.add_argument("--namespace", action="append", help="watch only these namespaces")
    p.add_argument("--standalone", action="store_true", help="no peering (one replica only)")
    p.add_argument("--peering", help="kopf peering object to coordinate replicas through")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """kopf's own runner, not its CLI: the CLI installs kopf's plain, unredacted log format."""
    import importlib

    import kopf

    from pdfqueue.domain.settings import Settings
    from pdfqueue.observability.logging import setup_logging

    setup_logging()
    importlib.import_module("pdfqueue_operator")  # registers the handlers
    port = Settings().operator_health_port
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace or (),
        standalone=True if args.standalone else None,
        peering_name=args.peering,
        liveness_endpoint=f"http://0.0.0.0:{port}/healthz",
    )
    return 0
