"""`pdfqueue operator`: run the kopf operator (same as `kopf run -m pdfqueue_operator`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("operator", help="run the Kubernetes operator")
    p.add_argument("--namespace", action="append", help="watch only these namespaces")
    p.add_argument("--standalone", action="store_true", help="no peering (one replica only)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kopf.cli import main as kopf_main

    argv = ["run", "-m", "pdfqueue_operator", "--liveness=http://0.0.0.0:8080/healthz"]
    argv += [f"--namespace={ns}" for ns in args.namespace or []] or ["--all-namespaces"]
    if args.standalone:
        argv.append("--standalone")
    sys.argv = ["kopf", *argv]
    kopf_main()
    return 0
