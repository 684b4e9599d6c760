"""The stores' health: PostgreSQL and the object store reachable, PostgreSQL's connections in
use, and how long the stalest running batch has gone without progress."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import Gauge
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import PdfQueueError
from pdfqueue.observability import metrics
from pdfqueue.observability.periodic import Periodic
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.pool import connection_use
from pdfqueue.stores.storage import Storage

log = logging.getLogger(__name__)


@dataclass
class ProgressClock:
    """When each running batch's processed count last changed, as seen by this process.

    A batch first seen counts as moving then: a process that just started never reports an
    age it did not watch. A count that is missing (the batch's live state is gone) is no
    progress: the batch keeps its last count and the time it last changed.
    """

    _since: dict[str, tuple[bytes | None, float]] = field(default_factory=dict)

    def observe(self, processed: Mapping[str, bytes | None], now: float) -> float:
        """Record the counts of the batches running now; the oldest age without change."""
        since: dict[str, tuple[bytes | None, float]] = {}
        for batch_id, count in processed.items():
            seen = self._since.get(batch_id)
            if seen is None or (count is not None and count != seen[0]):
                since[batch_id] = (count, now)
            else:
                since[batch_id] = seen
        self._since = since  # finished batches drop out
        return max((now - moved for _, moved in since.values()), default=0.0)

    def moved_at(self, batch_id: str) -> float | None:
        """When the batch's count last changed (None: not running when last observed)."""
        seen = self._since.get(batch_id)
        return seen[1] if seen is not None else None


@dataclass
class StoreGauges:
    """Polls PostgreSQL (its running batches) and Redis (their counts) every `interval_s`,
    and checks `storage` (when given) as often.

    Loops of their own, so a hung PostgreSQL never delays the queue gauges or the heartbeat,
    and a hung object store never delays PostgreSQL's gauge.
    """

    redis: Redis
    batches: BatchStore
    interval_s: float = 5.0
    storage: Storage | None = None
    clock: ProgressClock = field(default_factory=ProgressClock)
    _loops: list[Periodic] = field(default_factory=list, init=False, repr=False)

    async def poll(self, now: float | None = None) -> None:
        """One poll (at monotonic time `now`): a failure to list the batches or count the
        connections is PostgreSQL's, which the loop reports."""
        use = await connection_use(self.batches.pool)
        metrics.POSTGRES_CONNECTIONS.set(use.used)
        metrics.POSTGRES_CONNECTION_LIMIT.set(use.limit)
        running = await self.batches.processing()
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for batch_id in running:
                    pipe.hget(keys.batch(batch_id), "processed")
                counts = await pipe.execute()
        except Exception as exc:  # Redis's own gauge says so; the batches' ages stay as they were
            log.debug("batch progress not read from redis: %r", exc)
            return
        now = time.monotonic() if now is None else now
        age_s = self.clock.observe(dict(zip(running, counts, strict=True)), now)
        metrics.BATCH_PROGRESS_AGE.set(age_s)

    async def check_storage(self) -> None:
        """One check of the object store (a failure is the store's, which the loop reports);
        and, while its last write was refused, a probe write, so that pdfqueue_storage_writable
        comes back once it takes writes even in a process that has none to make."""
        if self.storage is not None:
            await self.storage.check()
            with contextlib.suppress(PdfQueueError):  # kept in `storage.writes`
                await self.storage.probe_write()

    def start(self) -> None:
        if self._loops:
            return
        metrics.register("postgres")
        self._loops.append(self._every("store-gauges", self.poll, metrics.POSTGRES_UP))
        if self.storage is not None:
            metrics.register("storage")
            metrics.STORAGE_WRITABLE.set(0 if self.storage.writes.refused else 1)
            self._loops.append(self._every("storage-gauge", self.check_storage, metrics.STORAGE_UP))
        for loop in self._loops:
            loop.start()

    def _every(self, name: str, tick: Callable[[], Awaitable[None]], up: Gauge) -> Periodic:
        return Periodic(
            name,
            self.interval_s,
            tick,
            timeout_s=max(self.interval_s, 1.0),
            on_error=lambda _exc: up.set(0),
            on_ok=lambda: up.set(1),
        )

    async def stop(self) -> None:
        loops, self._loops = self._loops, []
        for loop in loops:
            await loop.stop()
