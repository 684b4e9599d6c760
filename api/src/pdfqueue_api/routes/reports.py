"""A batch's per-file report: whole (JSON or CSV, streamed) or one filtered page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from pdfqueue.domain.csvsafe import csv_line
from pdfqueue.domain.models import FilePage, FileQuery, FileResult, FileSort, Outcome
from pdfqueue_api.auth import Tenant
from pdfqueue_api.dependencies import BatchId, Service
from pdfqueue_api.problems import errors
from pdfqueue_api.shares import ReadSlot, ReportSlot

router = APIRouter()
CHUNK_BYTES = 64 * 1024
"""A whole report is sent in chunks of about this size, not a write per row."""


class ReportPage(BaseModel):
    """Query parameters of the paged report."""

    model_config = ConfigDict(extra="forbid")

    outcome: Outcome | Literal["ignored"] | None = None
    reason: str | None = Field(default=None, max_length=200)
    search: str | None = Field(default=None, max_length=200, description="part of the name")
    sort: FileSort = "index"
    offset: int = Field(default=0, ge=0, le=10_000_000)
    limit: int = Field(default=50, ge=1, le=500)


@router.get(
    "/v1/batches/{batch_id}/files",
    response_model=list[FileResult],
    responses={
        200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
        **errors(401, 404, 429, 503),
    },
    dependencies=[ReportSlot],
)
async def batch_files(
    batch_id: BatchId,
    tenant: Tenant,
    service: Service,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> Response:
    """Per-file outcomes with reasons, as JSON or `?format=csv`, streamed a page of rows at
    a time. A tenant streams PDFQUEUE_QUOTA_CONCURRENT_REPORTS reports at once from one API
    process; one more gets 429 with Retry-After."""
    rows = service.files(tenant, batch_id)
    first = await anext(rows, None)  # raises 404 before the response starts
    if format == "csv":
        return StreamingResponse(
            _chunked(_csv(first, rows)),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{batch_id}.csv"'},
        )
    return StreamingResponse(_chunked(_json(first, rows)), media_type="application/json")


@router.get(
    "/v1/batches/{batch_id}/files/page",
    response_model=FilePage,
    responses=errors(401, 404, 429, 503),
    dependencies=[ReadSlot],
)
async def batch_files_page(
    batch_id: BatchId, tenant: Tenant, service: Service, page: Annotated[ReportPage, Query()]
) -> FilePage:
    """One page of the per-file report: filter by outcome and reason, search by name."""
    query = FileQuery(**page.model_dump())
    return await service.file_page(tenant, batch_id, query)


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


async def _chunked(parts: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`parts` joined into chunks of at least CHUNK_BYTES (the last one shorter)."""
    chunk = bytearray()
    async for part in parts:
        chunk += part
        if len(chunk) >= CHUNK_BYTES:
            yield bytes(chunk)
            chunk.clear()
    if chunk:
        yield bytes(chunk)
