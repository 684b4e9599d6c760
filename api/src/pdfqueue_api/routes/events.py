"""A batch's progress as Server-Sent Events, from the process's shared feed."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.responses import Response

from pdfqueue.domain.models import TERMINAL
from pdfqueue_api.auth import Tenant
from pdfqueue_api.batch_feed import MAX_EVENT_ID, EventStream, event_id
from pdfqueue_api.dependencies import BatchId, Feed, Service
from pdfqueue_api.problems import errors
from pdfqueue_api.shares import ReadSlot

router = APIRouter()


@router.get(
    "/v1/batches/{batch_id}/events",
    responses={
        200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}},
        204: {"description": "The client already saw the batch's terminal state."},
        **errors(401, 404, 429, 503),
    },
    dependencies=[ReadSlot],
)
async def batch_events(
    batch_id: BatchId, request: Request, tenant: Tenant, service: Service, feed: Feed
) -> Response:
    """Server-Sent Events: `status` events (a BatchSummary each) until a terminal state.

    Each event's id names the state; reconnecting with `Last-Event-ID` skips the state
    already seen, and once the batch has ended and been seen the answer is 204. A tenant
    holding PDFQUEUE_MAX_EVENT_STREAMS_PER_TENANT streams gets 429 with Retry-After; a
    process holding PDFQUEUE_MAX_EVENT_STREAMS gets 503.
    """
    first = await service.get(tenant, batch_id)
    last_seen = request.headers.get("last-event-id", "")[:MAX_EVENT_ID] or None
    if first.status in TERMINAL and last_seen == event_id(first):
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return EventStream(feed, feed.subscribe(first, tenant), last_seen)
