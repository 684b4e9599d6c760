"""`pdfqueue operator`: run the kopf operator (same as `kopf run -m pdfqueue_operator`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("operator", help="run the Kubernetes operator")
    p.add_argument("--namespace", action="append", help="watch only these namespaces")
    p.add_argument("--standalone", action="store_true", help="no peering (one replica only)")
    p.add_argument("--peering", help="kopf peering object to coordinate replicas through")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kopf.cli import main as kopf_main

    from pdfqueue.settings import Settings

    port = Settings().operator_health_port
    argv = ["run", "-m", "pdfqueue_operator", f"--liveness=http://0.0.0.0:{port}/healthz"]
    argv += [f"--namespace={ns}" for ns in args.namespace or []] or ["--all-namespaces"]
    if args.standalone:
        argv.append("--standalone")
    if args.peering:
        argv.append(f"--peering={args.peering}")
    sys.argv = ["kopf", *argv]
    kopf_main()
    return 0
