"""The ASGI application: the routers, the middleware and a lifespan over the runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue_api.problems import add_error_handlers
from pdfqueue_api.routes import batches, events, health, page, reports
from pdfqueue_api.runtime import ApiRuntime
from pdfqueue_api.security_headers import SecurityHeadersMiddleware
from pdfqueue_api.telemetry import FASTAPI_TELEMETRY, TelemetryMiddleware


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API; raises ConfigurationError when it would run open without being asked to."""
    settings = settings or Settings()
    settings.check_api_auth()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.runtime = runtime = await ApiRuntime.start(settings)
        try:
            yield
        finally:
            await runtime.close()

    app = FastAPI(
        title="pdfqueue",
        version="0.1.0",
        summary="Bulk PDF-to-user linking: upload a ZIP, follow the batch, read the report.",
        lifespan=lifespan,
        telemetry=FASTAPI_TELEMETRY,
        # Swagger UI and ReDoc load their code from a CDN, which the CSP (rightly) refuses;
        # /openapi.json stays for clients and tools.
        docs_url=None,
        redoc_url=None,
    )
    add_error_handlers(app)
    for router in (batches.router, reports.router, events.router, health.router, page.router):
        app.include_router(router)
    metrics.register("api")
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(TelemetryMiddleware)
    return app
