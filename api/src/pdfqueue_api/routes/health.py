"""Probes and scrapes: liveness, readiness per dependency, Prometheus metrics."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from pdfqueue.domain.errors import CertificateRejected, SchemaNotReady, StoreNearlyFull
from pdfqueue.stores.postgres import schema
from pdfqueue.stores.postgres.pool import ping
from pdfqueue_api.dependencies import Connections, Service
from pdfqueue_api.service import DEPENDENCY_TIMEOUT_S

log = logging.getLogger(__name__)
router = APIRouter()


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", include_in_schema=False)
async def readyz(stores: Connections, service: Service) -> JSONResponse:
    """ok/error per dependency; anyone may ask, so the why goes to the log only, but for
    the schema's versions and a store's certificate that does not verify (its reason)."""
    checks = {
        "redis": stores.lifecycle.ping(),
        "postgresql": ping(stores.pool),
        "storage": stores.storage.check(),
        "schema": schema.require(stores.pool),
    }
    results = await asyncio.gather(
        *(asyncio.wait_for(c, DEPENDENCY_TIMEOUT_S) for c in checks.values()),
        return_exceptions=True,
    )
    report: dict[str, str] = {}
    for name, result in zip(checks, results, strict=True):
        if isinstance(result, BaseException):
            report[name] = _state(result)
            log.warning("readiness: %s failed: %r", name, result)
        else:
            report[name] = "ok"
    if report["redis"] == report["postgresql"] == "ok":
        try:
            await asyncio.wait_for(service.room(), DEPENDENCY_TIMEOUT_S)
        except StoreNearlyFull as full:  # reads still work: say it, stay ready
            report[full.service] = f"ok, but new uploads are refused: {full.used}"
        except Exception as exc:
            log.warning("readiness: the stores' room not read: %r", exc)
    ready = all(v.startswith("ok") for v in report.values())
    return JSONResponse(report, status_code=200 if ready else 503)


def _state(failure: BaseException) -> str:
    """What /readyz says of a failed check: the schema's versions and the operator's next
    step, or a certificate's reason; else only that it failed."""
    if isinstance(failure, SchemaNotReady):
        return str(failure)
    if isinstance(failure, CertificateRejected):
        return f"error: {failure.public_detail()}"
    return "error"


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
