"""Batches: upload, list, read, cancel or erase, and retry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from pdfqueue.domain.errors import ArchiveTooLarge, MalformedRequest, UnsupportedMediaType
from pdfqueue.domain.models import BatchPage, BatchSummary
from pdfqueue.erasure import BatchErasure
from pdfqueue_api.auth import Tenant
from pdfqueue_api.dependencies import BatchId, Service
from pdfqueue_api.problems import errors
from pdfqueue_api.shares import ReadSlot
from pdfqueue_api.upload import ZIP_TYPES, BodyPace, FormFileReader, paced

router = APIRouter()


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


@router.post(
    "/v1/batches",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BatchCreated,
    responses=errors(400, 401, 408, 413, 415, 422, 429, 503),
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
        received = paced(request.stream(), BodyPace.from_settings(service.settings))
        body = decode(admission.meter(received))
        batch_id = await service.create(
            tenant, body, batch_id=admission.ticket, name=file_name, callback=callback_url
        )
    base = service.settings.public_url or str(request.base_url)
    return BatchCreated(batch_id=batch_id, status_url=f"{base.rstrip('/')}/v1/batches/{batch_id}")


@router.get(
    "/v1/batches",
    response_model=BatchPage,
    responses=errors(400, 401, 429, 503),
    dependencies=[ReadSlot],
)
async def list_batches(
    tenant: Tenant,
    service: Service,
    cursor: Annotated[str | None, Query(max_length=512, pattern="^[A-Za-z0-9_-]+$")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> BatchPage:
    """This tenant's batches, newest first; pass `next_cursor` back as `cursor` for more."""
    return await service.batches(tenant, cursor, limit)


@router.get(
    "/v1/batches/{batch_id}",
    response_model=BatchSummary,
    responses=errors(401, 404, 429, 503),
    dependencies=[ReadSlot],
)
async def get_batch(batch_id: BatchId, tenant: Tenant, service: Service) -> BatchSummary:
    """Live progress; after the live state expires, the durable summary."""
    return await service.get(tenant, batch_id)


@router.delete(
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


@router.post(
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
