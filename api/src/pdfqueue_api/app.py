"""The ASGI application: routes are thin, BatchService does the work."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from pdfqueue.domain.advice import ADVICE
from pdfqueue.domain.csvsafe import csv_line
from pdfqueue.domain.errors import (
    ArchiveTooLarge,
    MalformedRequest,
    PdfQueueError,
    SchemaNotReady,
    UnsupportedMediaType,
    UploadAborted,
)
from pdfqueue.domain.keys import BATCH_ID_PATTERN
from pdfqueue.domain.models import (
    TERMINAL,
    BatchPage,
    BatchSummary,
    FilePage,
    FileQuery,
    FileResult,
    FileSort,
    Outcome,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import BatchErasure
from pdfqueue.observability import metrics
from pdfqueue.runtime.connections import API, Stores
from pdfqueue.runtime.gauges import QueueGauges
from pdfqueue.runtime.progress import StoreGauges
from pdfqueue.stores import schema
from pdfqueue.stores.queue import check_durability
from pdfqueue_api.auth import require_tenant
from pdfqueue_api.events import MAX_EVENT_ID, BatchFeed, EventStream, event_id
from pdfqueue_api.kube import PdfBatchPublisher
from pdfqueue_api.security_headers import SecurityHeadersMiddleware
from pdfqueue_api.service import DEPENDENCY_TIMEOUT_S, BatchService
from pdfqueue_api.telemetry import FASTAPI_TELEMETRY, TelemetryMiddleware
from pdfqueue_api.upload import ZIP_TYPES, FormFileReader

log = logging.getLogger(__name__)
Tenant = Annotated[str, Depends(require_tenant)]
BatchId = Annotated[str, Path(pattern=BATCH_ID_PATTERN, description="32 lowercase hex digits")]
"""A batch id path parameter: anything else is a 422 before it reaches a store."""


class BatchCreated(BaseModel):
    batch_id: str
    status_url: str


class ErasureAnswer(BaseModel):
    """What `DELETE /v1/batches/{id}?erase=true` removed; `erased` false while it waits."""

    batch_id: str
    erased: bool
    batches: int
    files: int
    objects: int
    bytes: int
    links: int


def _deleted(done: BatchSummary | BatchErasure) -> BatchSummary | JSONResponse:
    """A cancel's summary; an erasure's 200 with what went, or 202 with `Retry-After` while
    the batch's last jobs may still run."""
    if isinstance(done, BatchSummary):
        return done
    erased = done
    answer = ErasureAnswer(batch_id=erased.batch_id, erased=erased.done, **asdict(erased.removed))
    if erased.done:
        return JSONResponse(answer.model_dump())
    headers = {"Retry-After": str(erased.retry_after_s)}
    return JSONResponse(answer.model_dump(), status.HTTP_202_ACCEPTED, headers=headers)


class ReportPage(BaseModel):
    """Query parameters of the paged report."""

    model_config = ConfigDict(extra="forbid")

    outcome: Outcome | Literal["ignored"] | None = None
    reason: str | None = Field(default=None, max_length=200)
    search: str | None = Field(default=None, max_length=200, description="part of the name")
    sort: FileSort = "index"
    offset: int = Field(default=0, ge=0, le=10_000_000)
    limit: int = Field(default=50, ge=1, le=500)


class Problem(BaseModel):
    """Every error answer: what went wrong, in words."""

    detail: str


ERRORS = {
    400: "A malformed parameter (a cursor this API did not hand out) or request framing (a"
    " multipart Content-Type without a valid boundary).",
    401: "Missing or unknown bearer token.",
    404: "Unknown batch, or another tenant's.",
    413: "Over PDFQUEUE_MAX_UPLOAD_BYTES.",
    409: "The batch is not COMPLETED, has no file to retry, or its retry is running.",
    415: "Neither application/zip nor multipart/form-data.",
    422: "Not a ZIP archive.",
    429: "A quota of the tenant is used up; Retry-After says when to try again.",
    503: "Redis, PostgreSQL or storage is unavailable; retry later.",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """Declared error answers for /openapi.json, so clients (and schemathesis) know them."""
    return {code: {"model": Problem, "description": ERRORS[code]} for code in codes}


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API; raises ConfigurationError when it would run open without being asked to."""
    settings = settings or Settings()
    settings.check_api_auth()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.allow_anonymous:
            log.warning("PDFQUEUE_ALLOW_ANONYMOUS: the API accepts requests without a token")
        stores = await Stores.open(settings, API)
        try:
            for problem in await check_durability(stores.redis):
                log.warning("REDIS IS NOT SAFE FOR A QUEUE: %s", problem)
        except Exception as exc:  # Redis down at start: /readyz says so until it is back
            log.warning("redis not reachable at start: %r", exc)
        publisher = None  # Kubernetes mode: the API also creates a PdfBatch per upload
        if settings.kubernetes_namespace:
            publisher = PdfBatchPublisher(settings.kubernetes_namespace, settings.kubeconfig)
        app.state.settings = settings
        app.state.service = BatchService(
            settings, stores.redis, stores.lifecycle, stores.db, stores.storage, publisher
        )
        gauges = QueueGauges(stores.redis, settings.queue_name, settings.metrics_interval_s)
        gauges.start()
        store_gauges = StoreGauges(stores.redis, stores.db, settings.metrics_interval_s)
        store_gauges.start()
        app.state.feed = BatchFeed(
            app.state.service.read,
            settings.events_interval_s,
            settings.max_event_streams,
            settings.max_event_streams_per_tenant,
        )
        app.state.feed.start()
        try:
            yield
        finally:
            await app.state.feed.stop()
            await gauges.stop()
            await store_gauges.stop()
            if publisher is not None:
                await publisher.close()
            await stores.close()

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
    _add_error_handlers(app)
    _add_routes(app)
    metrics.register("api")
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(TelemetryMiddleware)
    return app


def _service(request: Request) -> BatchService:
    service: BatchService = request.app.state.service
    return service


Service = Annotated[BatchService, Depends(_service)]


def _add_routes(app: FastAPI) -> None:
    @app.post(
        "/v1/batches",
        status_code=status.HTTP_202_ACCEPTED,
        response_model=BatchCreated,
        responses=errors(400, 401, 413, 415, 422, 429, 503),
        openapi_extra={
            "requestBody": {
                "content": {
                    "application/zip": {"schema": {"type": "string", "format": "binary"}},
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "properties": {"file": {"type": "string", "format": "binary"}},
                            "required": ["file"],
                        }
                    },
                },
                "required": True,
            }
        },
    )
    async def create_batch(
        request: Request,
        tenant: Tenant,
        service: Service,
        # No constraint, hence no validation answer to document besides a body's 422: any
        # name is accepted, then sanitised and cut (display only); a callback_url is checked
        # by `check_callback`, length included, so its 422 has this API's `detail` too.
        name: str | None = None,
        callback_url: str | None = None,
    ) -> BatchCreated:
        """Upload a ZIP of PDFs (raw `application/zip` body, or multipart field `file`).

        The file's name, shown in the batch list, is the multipart part's `filename`, or for
        a raw body `?name=` or the `X-Filename` header; display only (cut to 200 characters,
        control characters removed). `?callback_url=` names an https URL to call, signed,
        when the batch completes (422 if it is not one pdfqueue will call).
        """
        limit = service.settings.max_upload_bytes
        declared = _content_length(request)
        if declared > limit:
            raise ArchiveTooLarge(limit)
        decode, form = _body_decoder(request.headers.get("content-type", ""))
        given = name or request.headers.get("x-filename")

        def file_name() -> str | None:
            return form.filename if form is not None and form.filename else given

        await service.check_callback(tenant, callback_url)  # 422 before any byte
        async with service.admitted(tenant, declared) as admission:  # 429 before any byte
            body = decode(admission.meter(request.stream()))
            batch_id = await service.create(
                tenant, body, batch_id=admission.ticket, name=file_name, callback=callback_url
            )
        base = service.settings.public_url or str(request.base_url)
        return BatchCreated(
            batch_id=batch_id, status_url=f"{base.rstrip('/')}/v1/batches/{batch_id}"
        )

    @app.get("/v1/batches", response_model=BatchPage, responses=errors(400, 401, 503))
    async def list_batches(
        tenant: Tenant,
        service: Service,
        cursor: Annotated[str | None, Query(max_length=512, pattern="^[A-Za-z0-9_-]+$")] = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> BatchPage:
        """This tenant's batches, newest first; pass `next_cursor` back as `cursor` for more."""
        return await service.batches(tenant, cursor, limit)

    @app.get("/v1/batches/{batch_id}", response_model=BatchSummary, responses=errors(401, 404, 503))
    async def get_batch(batch_id: BatchId, tenant: Tenant, service: Service) -> BatchSummary:
        """Live progress; after the live state expires, the durable summary."""
        return await service.get(tenant, batch_id)

    @app.delete(
        "/v1/batches/{batch_id}",
        response_model=BatchSummary | ErasureAnswer,
        responses={202: {"model": ErasureAnswer}, **errors(401, 404, 503)},
    )
    async def cancel_batch(
        batch_id: BatchId,
        tenant: Tenant,
        service: Service,
        erase: Annotated[bool, Query()] = False,
    ) -> BatchSummary | JSONResponse:
        """Cancel: pending PDFs are dropped, running ones finish and are counted.

        With `?erase=true`, erase the batch instead: cancelled if it runs, then its ZIP, its
        rows, the PDFs it stored and the links to them are removed, and the batch is 404 from
        then on. 200 when done; 202 with `Retry-After` while its last jobs may still run
        (ask again, or let the next purge finish it).
        """
        return _deleted(await service.delete(tenant, batch_id, erase=erase))

    @app.get(
        "/v1/batches/{batch_id}/files",
        response_model=list[FileResult],
        responses={
            200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
            **errors(401, 404, 503),
        },
    )
    async def batch_files(
        batch_id: BatchId,
        tenant: Tenant,
        service: Service,
        format: Annotated[str, Query(pattern="^(json|csv)$")] = "json",
    ) -> Response:
        """Per-file outcomes with reasons, as JSON or `?format=csv`."""
        rows = service.files(tenant, batch_id)
        first = await anext(rows, None)  # raises 404 before the response starts
        if format == "csv":
            return StreamingResponse(
                _csv(first, rows),
                media_type="text/csv",
                headers={"Content-Disposition": f'attachment; filename="{batch_id}.csv"'},
            )
        return StreamingResponse(_json(first, rows), media_type="application/json")

    @app.get(
        "/v1/batches/{batch_id}/files/page",
        response_model=FilePage,
        responses=errors(401, 404, 503),
    )
    async def batch_files_page(
        batch_id: BatchId, tenant: Tenant, service: Service, page: Annotated[ReportPage, Query()]
    ) -> FilePage:
        """One page of the per-file report: filter by outcome and reason, search by name."""
        query = FileQuery(**page.model_dump())
        return await service.file_page(tenant, batch_id, query)

    @app.get(
        "/v1/batches/{batch_id}/events",
        responses={
            200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
            204: {"description": "The client already saw the batch's terminal state."},
            **errors(401, 404, 429, 503),
        },
    )
    async def batch_events(
        batch_id: BatchId, request: Request, tenant: Tenant, service: Service
    ) -> Response:
        """Server-Sent Events: `status` events (a BatchSummary each) until a terminal state.

        Each event's id names the state; reconnecting with `Last-Event-ID` skips the state
        already seen, and once the batch has ended and been seen the answer is 204. A tenant
        holding PDFQUEUE_MAX_EVENT_STREAMS_PER_TENANT streams gets 429 with Retry-After; a
        process holding PDFQUEUE_MAX_EVENT_STREAMS gets 503.
        """
        feed: BatchFeed = request.app.state.feed
        first = await service.get(tenant, batch_id)
        last_seen = request.headers.get("last-event-id", "")[:MAX_EVENT_ID] or None
        if first.status in TERMINAL and last_seen == event_id(first):
            return Response(status_code=status.HTTP_204_NO_CONTENT)
        return EventStream(feed, feed.subscribe(first, tenant), last_seen)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz(service: Service) -> JSONResponse:
        """ok/error per dependency; anyone may ask, so the why goes to the log only (but for
        the schema's versions)."""
        checks = {
            "redis": service.lifecycle.ping(),
            "postgresql": service.db.check(),
            "storage": service.storage.check(),
            "schema": schema.require(service.db.pool),
        }
        results = await asyncio.gather(
            *(asyncio.wait_for(c, DEPENDENCY_TIMEOUT_S) for c in checks.values()),
            return_exceptions=True,
        )
        report: dict[str, str] = {}
        for name, result in zip(checks, results, strict=True):
            failed = isinstance(result, BaseException)
            # a schema too old or too new says so: versions only, and the operator's next step
            report[name] = (
                str(result) if isinstance(result, SchemaNotReady) else "error" if failed else "ok"
            )
            if failed:
                log.warning("readiness: %s failed: %r", name, result)
        ready = all(v == "ok" for v in report.values())
        return JSONResponse(report, status_code=200 if ready else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    _add_retry(app)
    _add_page(app)


def _add_retry(app: FastAPI) -> None:
    @app.post(
        "/v1/batches/{batch_id}/retry",
        status_code=status.HTTP_202_ACCEPTED,
        response_model=BatchSummary,
        responses=errors(401, 404, 409, 429, 503),
    )
    async def retry_batch(
        batch_id: BatchId, tenant: Tenant, service: Service, all_failed: bool = False
    ) -> BatchSummary:
        """Re-run the failed files of a COMPLETED batch: those that failed for a reason that
        may pass (a dependency down, a timeout, a lost worker), or with `?all_failed=true`
        every failed file. Each file keeps its history (`tries`, `previous_reason`). A retry
        takes a concurrent-batch slot as an upload does and has a rate quota of its own
        (`retries_per_hour`): 429 with Retry-After past either."""
        return await service.retry(tenant, batch_id, all_failed=all_failed)


ASSETS = {
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "advice.json": "application/json",
}
"""The page's own style, script and reason table: served here, so its CSP needs nothing
inline or remote."""


def _add_page(app: FastAPI) -> None:
    package = resources.files("pdfqueue_api")
    page = package.joinpath("page.html").read_text()
    assets = {
        name: package.joinpath("static", name).read_bytes()
        for name in ASSETS
        if name != "advice.json"
    }
    assets["advice.json"] = json.dumps(ADVICE).encode()

    @app.get("/", include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page.replace("%ROOT%", ""))

    @app.get("/batches/{batch_id}", include_in_schema=False)
    async def batch_page(batch_id: BatchId) -> HTMLResponse:
        """The same page; its script shows the batch named in the URL (so a reload resumes)."""
        return HTMLResponse(page.replace("%ROOT%", "../"))

    @app.get("/static/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        if name not in assets:
            raise HTTPException(status.HTTP_404_NOT_FOUND)
        return Response(
            assets[name], media_type=ASSETS[name], headers={"Cache-Control": "no-cache"}
        )


def _content_length(request: Request) -> int:
    """The declared body size (0 when chunked); 400 for anything but one decimal number
    (uvicorn's parser refuses those first; this holds behind any other server too)."""
    values = request.headers.getlist("content-length")
    if not values:
        return 0
    if len(set(values)) != 1 or not values[0].isascii() or not values[0].isdigit():
        msg = "Content-Length is not one decimal number"
        raise MalformedRequest(msg)
    return int(values[0])


def _body_decoder(
    content_type: str,
) -> tuple[Callable[[AsyncIterator[bytes]], AsyncIterator[bytes]], FormFileReader | None]:
    """How to get the ZIP's bytes out of a body of this type (415 for any other type), and
    the multipart reader when there is one (it learns the file's name)."""
    media_type = content_type.split(";", maxsplit=1)[0].strip().lower()
    if media_type == "multipart/form-data":
        reader = FormFileReader(content_type)
        return reader.file_chunks, reader
    if media_type in ZIP_TYPES:
        return (lambda body: body), None
    msg = f"send a ZIP as application/zip or multipart/form-data, not {media_type!r}"
    raise UnsupportedMediaType(msg)


async def _json(first: FileResult | None, rest: AsyncIterator[FileResult]) -> AsyncIterator[bytes]:
    yield b"["
    if first is not None:
        yield first.model_dump_json().encode()
        async for row in rest:
            yield b"," + row.model_dump_json().encode()
    yield b"]"


async def _csv(first: FileResult | None, rest: AsyncIterator[FileResult]) -> AsyncIterator[bytes]:
    columns = list(FileResult.model_fields)
    yield csv_line(columns)
    if first is not None:
        yield csv_line(getattr(first, c) for c in columns)
        async for row in rest:
            yield csv_line(getattr(row, c) for c in columns)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PdfQueueError)
    async def problem(_request: Request, exc: PdfQueueError) -> Response:
        """Every error of ours answers its own status, with its own headers."""
        if isinstance(exc, UploadAborted):
            log.info("client disconnected mid-upload; the partial upload was removed")
            return Response(status_code=exc.http_status)
        if exc.http_status >= 500:
            log.warning("answering %d: %r", exc.http_status, exc, exc_info=exc.__cause__)
        return JSONResponse(
            {"detail": exc.public_detail()}, status_code=exc.http_status, headers=exc.headers()
        )
