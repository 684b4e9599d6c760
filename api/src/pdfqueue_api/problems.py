"""Error answers: each of our errors as its own status, and how /openapi.json declares them."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from pdfqueue.domain.errors import PdfQueueError, UploadAborted
from pdfqueue_api.validation import ANSWER_SCHEMA, invalid_request

log = logging.getLogger(__name__)


class Problem(BaseModel):
    """Every error answer: what went wrong, in words."""

    detail: str


ERRORS = {
    400: "A malformed parameter (a cursor this API did not hand out) or request framing (a"
    " multipart Content-Type without a valid boundary).",
    401: "Missing or unknown bearer token.",
    404: "Unknown batch, or another tenant's.",
    408: "The upload's body paused for PDFQUEUE_HTTP_BODY_TIMEOUT_S, or arrived slower than"
    " PDFQUEUE_HTTP_BODY_MIN_BYTES_PER_S; nothing of it was kept.",
    413: "Over PDFQUEUE_MAX_UPLOAD_BYTES.",
    409: "The batch is not COMPLETED, has no file to retry, or its retry is running.",
    415: "Neither application/zip nor multipart/form-data.",
    422: "Not a ZIP archive, or a parameter that does not fit (`errors` lists each misfit).",
    429: "A quota of the tenant is used up; Retry-After says when to try again.",
    503: "Redis, PostgreSQL or storage is unavailable; retry later.",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """Declared error answers for /openapi.json, so clients (and schemathesis) know them."""
    return {code: {"model": Problem, "description": ERRORS[code]} for code in codes}


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


def add_error_handlers(app: FastAPI) -> None:
    """Our errors, and every route's misfit parameters (one handler, one shape), as
    /openapi.json declares them."""
    app.exception_handler(PdfQueueError)(problem)
    app.exception_handler(RequestValidationError)(invalid_request)
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate().setdefault("components", {}).setdefault("schemas", {})
            if "HTTPValidationError" in schemas:
                schemas["HTTPValidationError"] = ANSWER_SCHEMA
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]
