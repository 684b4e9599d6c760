"""HTTP telemetry: FastAPI's own SERVER span, our Prometheus metrics and pdfqueue attributes.

FastAPI (>= 0.165) makes the server span natively: W3C `traceparent` in, route template as
the name, semantic-convention attributes, nothing recorded but the error type on failure.
That beats a span of our own and needs no instrumentation package. We turn off the parts
that would duplicate ours: its OTel metrics (we export Prometheus), its OTel exception logs
(messages we could not redact), its environment auto-configuration
(pdfqueue.observability.tracing owns the exporter) and its per-dependency spans (one API span
per request keeps traces short).
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from typing import Any

from fastapi.telemetry import TelemetryConfig
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pdfqueue.observability import metrics, tracing

UNTRACED = frozenset({"/metrics", "/healthz", "/readyz"})
"""Probes and scrapes arrive every few seconds and say nothing: measured, not traced."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _untraced(scope: MutableMapping[str, Any]) -> bool:
    return scope.get("path") in UNTRACED


FASTAPI_TELEMETRY: TelemetryConfig = {
    "tracing": True,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
    "exclude": _untraced,
}
"""`FastAPI(telemetry=...)`: the native server span only (see the module docstring)."""


class TelemetryMiddleware:
    """Latency and body size by method, route template and status; batch id on the span."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in METHODS else "OTHER"
        received = 0
        status = 500  # what the client gets if the app raises before answering

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
            return message

        async def status_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                # Routed by now, and the server span is still open (it ends with the body).
                tracing.annotate(batch_id=scope.get("path_params", {}).get("batch_id"))
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, counting_receive, status_send)
        finally:
            labels = (method, _route(scope), str(status))
            metrics.HTTP_DURATION.labels(*labels).observe(time.perf_counter() - started)
            metrics.HTTP_REQUEST_SIZE.labels(*labels).observe(received)


def _route(scope: Scope) -> str:
    """The matched route's template; one bounded value for everything unmatched."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else "unmatched"
