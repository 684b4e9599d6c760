"""Server-Sent Events of batch progress: one poller per process fans each change out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from pdfqueue.domain.models import TERMINAL, BatchSummary
from pdfqueue.observability.periodic import Periodic

log = logging.getLogger(__name__)
HEARTBEAT_S = 15.0
"""A comment line this often keeps proxies from closing an idle stream."""
RETRY_MS = 2000
"""How long a browser waits before it reconnects a broken stream."""
MAX_EVENT_ID = 80
"""A Last-Event-ID longer than any id we send is ignored, not compared."""

Reader = Callable[[str], Awaitable[BatchSummary | None]]


def event_id(summary: BatchSummary) -> str:
    """Names one state of a batch: a client that saw it is not sent it again. A retried
    batch's ids name the round, so its new completion is not taken for the first one."""
    state = f"{summary.status.value}:{summary.processed}"
    return f"{state}:r{summary.retries}" if summary.retries else state


def encode(summary: BatchSummary) -> bytes:
    data = summary.model_dump_json()
    return f"id: {event_id(summary)}\nevent: status\ndata: {data}\n\n".encode()


@dataclass(eq=False)
class Subscriber:
    """One open stream: the newest state of its batch, and a flag that it changed."""

    latest: BatchSummary
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, summary: BatchSummary) -> None:
        self.latest = summary
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
    watchers: dict[str, set[Subscriber]] = field(default_factory=dict)
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

    def subscribe(self, summary: BatchSummary) -> Subscriber:
        subscriber = Subscriber(summary)
        self.watchers.setdefault(summary.batch_id, set()).add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        batch_id = subscriber.latest.batch_id
        watching = self.watchers.get(batch_id, set())
        watching.discard(subscriber)
        if not watching:
            self.watchers.pop(batch_id, None)

    async def tick(self) -> None:
        """Read every watched batch once and hand each changed state to its streams."""
        batch_ids = list(self.watchers)
        results = await asyncio.gather(*(self.read(b) for b in batch_ids), return_exceptions=True)
        for batch_id, result in zip(batch_ids, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("batch feed: reading %s failed: %r", batch_id, result)
                continue
            if result is None:
                continue
            for subscriber in list(self.watchers.get(batch_id, ())):
                if event_id(subscriber.latest) != event_id(result):
                    subscriber.offer(result)

    async def stream(self, first: BatchSummary, last_seen: str | None) -> AsyncIterator[bytes]:
        """The events of one client from `first` on, skipping the state it last saw."""
        subscriber = self.subscribe(first)
        try:
            yield f"retry: {RETRY_MS}\n\n".encode()
            summary = first
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
                summary = subscriber.latest
        finally:
            self.unsubscribe(subscriber)
