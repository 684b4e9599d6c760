"""Server-Sent Events of batch progress: one poller per process fans each change out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from pdfqueue.domain.errors import QuotaExceeded, ServiceUnavailable
from pdfqueue.domain.models import TERMINAL, BatchSummary
from pdfqueue.observability.periodic import Periodic

log = logging.getLogger(__name__)
HEARTBEAT_S = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""
RETRY_MS = 2000
"""How long a browser waits before it reconnects a broken stream."""
MAX_EVENT_ID = 80
"""A Last-Event-ID longer than any id we send is ignored, not compared."""
STREAMS_RETRY_AFTER_S = 5
"""Retry-After of a tenant over its share of streams: a stream ends with its batch, so a
slot is usually free again within seconds."""

Reader = Callable[[str], Awaitable[BatchSummary | None]]


def event_id(summary: BatchSummary) -> str:
    """Names one state of a batch: a client that saw it is not sent it again. A retried
    batch's ids name the round, so its new completion is not taken for the first one."""
    state = f"{summary.status.value}:{summary.processed}"
    return f"{state}:r{summary.retries}" if summary.retries else state


def encode(summary: BatchSummary) -> bytes:
    data = summary.model_dump_json()
    return f"id: {event_id(summary)}\nevent: status\ndata: {data}\n\n".encode()


GONE = b"event: gone\ndata: {}\n\n"
"""The last event of a batch that is no longer there (erased): the stream ends with it."""


@dataclass(eq=False)
class Subscriber:
    """One open stream of one tenant: the newest state of its batch, and a flag that it
    changed."""

    latest: BatchSummary
    tenant: str
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    gone: bool = False
    """The batch is no longer there (erased): the stream says so and ends."""

    def offer(self, summary: BatchSummary) -> None:
        self.latest = summary
        self.changed.set()

    def end(self) -> None:
        self.gone = True
        self.changed.set()


@dataclass
class BatchFeed:
    """Reads each watched batch once per tick, whoever many streams watch it.

    The cost is one state read per watched batch per tick, not per client: 500 streams on
    one batch cost what one does, and a batch nobody watches costs nothing.
    """

    read: Reader
    interval_s: float
    max_streams: int
    max_tenant_streams: int
    """One tenant's share of `max_streams`: no token can take every stream of the process."""
    watchers: dict[str, set[Subscriber]] = field(default_factory=dict)
    by_tenant: dict[str, int] = field(default_factory=dict)
    _loop: Periodic | None = None

    @property
    def streams(self) -> int:
        return sum(len(s) for s in self.watchers.values())

    def start(self) -> None:
        # a dependency hiccup: streams wait for the next tick
        self._loop = Periodic("batch-feed", self.interval_s, self.tick)
        self._loop.start()

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()

    def subscribe(self, summary: BatchSummary, tenant: str) -> Subscriber:
        """Take a stream slot now, in the request (429 over the tenant's share, 503 when the
        process is full): counted before the response starts, so concurrent requests cannot
        all pass the check. The caller must `unsubscribe` it (EventStream does)."""
        held = self.by_tenant.get(tenant, 0)
        if held >= self.max_tenant_streams:
            raise QuotaExceeded("event_streams", self.max_tenant_streams, STREAMS_RETRY_AFTER_S)
        if self.streams >= self.max_streams:
            raise ServiceUnavailable("events", "too many open event streams")
        subscriber = Subscriber(summary, tenant)
        self.watchers.setdefault(summary.batch_id, set()).add(subscriber)
        self.by_tenant[tenant] = held + 1
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """Free the stream's slot; a second call does nothing."""
        batch_id = subscriber.latest.batch_id
        watching = self.watchers.get(batch_id, set())
        if subscriber not in watching:
            return
        watching.discard(subscriber)
        if not watching:
            self.watchers.pop(batch_id, None)
        left = self.by_tenant[subscriber.tenant] - 1
        if left:
            self.by_tenant[subscriber.tenant] = left
        else:
            del self.by_tenant[subscriber.tenant]

    async def tick(self) -> None:
        """Read every watched batch once and hand each changed state to its streams."""
        batch_ids = list(self.watchers)
        results = await asyncio.gather(*(self.read(b) for b in batch_ids), return_exceptions=True)
        for batch_id, result in zip(batch_ids, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("batch feed: reading %s failed: %r", batch_id, result)
                continue
            if result is None:  # erased: a stream left open would wait for ever
                for subscriber in list(self.watchers.get(batch_id, ())):
                    subscriber.end()
                continue
            for subscriber in list(self.watchers.get(batch_id, ())):
                if event_id(subscriber.latest) != event_id(result):
                    subscriber.offer(result)

    async def stream(self, subscriber: Subscriber, last_seen: str | None) -> AsyncIterator[bytes]:
        """The events of one client from its subscription on, skipping the state it last saw."""
        try:
            yield f"retry: {RETRY_MS}\n\n".encode()
            summary = subscriber.latest
            while True:
                if event_id(summary) != last_seen:
                    last_seen = event_id(summary)
                    yield encode(summary)
                if summary.status in TERMINAL:
                    return
                try:
                    await asyncio.wait_for(subscriber.changed.wait(), HEARTBEAT_S)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                subscriber.changed.clear()
                if subscriber.gone:
                    yield GONE
                    return
                summary = subscriber.latest
        finally:
            self.unsubscribe(subscriber)


class EventStream(StreamingResponse):
    """The stream of one subscriber; its slot is freed when the response ends however it
    ends, even if the body never started (a client gone before the first byte)."""

    def __init__(self, feed: BatchFeed, subscriber: Subscriber, last_seen: str | None) -> None:
        super().__init__(
            feed.stream(subscriber, last_seen),
            media_type="text/event-stream",
            headers={"X-Accel-Buffering": "no"},
        )
        self.feed = feed
        self.subscriber = subscriber

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.feed.unsubscribe(self.subscriber)
