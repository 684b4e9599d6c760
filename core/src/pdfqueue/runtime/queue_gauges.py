"""Queue-depth and Redis gauges, refreshed by a background task of the API and each worker.

Why a task and not a custom Collector that reads Redis at scrape time: prometheus-client calls
collectors on its HTTP thread, which would need a second, synchronous Redis client per
process, and a slow or dead Redis would then make every scrape slow or fail. The task reuses
the process's async client, costs three round trips per tick, and a scrape only reads numbers;
the price is that the gauges are up to one interval old.

The API and every worker publish the same queue gauges, so dashboards and alerts take `max`
over them; the API keeps them alive when the workers are scaled to zero.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from redis.asyncio import Redis

from pdfqueue.observability import metrics
from pdfqueue.observability.periodic import Periodic
from pdfqueue.stores.redis.fair_dispatch import pending_jobs

log = logging.getLogger(__name__)


@dataclass
class QueueGauges:
    redis: Redis
    queue_name: str
    interval_s: float = 5.0
    _loop: Periodic | None = field(default=None, init=False, repr=False)
    _expected: float = field(default_factory=time.monotonic, init=False, repr=False)

    async def poll(self) -> None:
        """Read the queue and Redis memory once and set the gauges."""
        now_ms = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcount(self.queue_name, "-inf", now_ms)
            pipe.zcount(self.queue_name, f"({now_ms}", "+inf")
            pipe.zrangebyscore(self.queue_name, "-inf", now_ms, start=0, num=1, withscores=True)
            ready, deferred, oldest = await pipe.execute()
        metrics.QUEUE_READY.labels(self.queue_name).set(ready)
        pending = await pending_jobs(self.redis, self.queue_name)
        metrics.QUEUE_PENDING.labels(self.queue_name).set(pending)
        metrics.QUEUE_DEFERRED.labels(self.queue_name).set(deferred)
        age_s = (now_ms - oldest[0][1]) / 1000 if oldest else 0.0
        metrics.QUEUE_OLDEST_AGE.labels(self.queue_name).set(max(age_s, 0.0))
        try:
            memory = await self.redis.info("memory")
        except Exception as exc:  # INFO can be disabled on managed Redis; the queue still counts
            log.debug("redis INFO memory refused: %r", exc)
        else:
            metrics.REDIS_USED_MEMORY.set(memory.get("used_memory", 0))
            metrics.REDIS_MAXMEMORY.set(memory.get("maxmemory", 0))

    async def _tick(self) -> None:
        """One poll; each tick also stamps the heartbeat and measures event-loop lag."""
        metrics.EVENT_LOOP_LAG.set(max(time.monotonic() - self._expected, 0.0))
        metrics.HEARTBEAT.set(time.time())
        try:
            await self.poll()
        finally:
            self._expected = time.monotonic() + self.interval_s

    def start(self) -> None:
        metrics.register("queue")
        if self._loop is None:
            self._loop = Periodic(
                "queue-gauges",
                self.interval_s,
                self._tick,
                timeout_s=max(self.interval_s, 1.0),
                on_error=lambda _exc: metrics.REDIS_UP.set(0),
                on_ok=lambda: metrics.REDIS_UP.set(1),
            )
            self._loop.start()

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
        self._loop = None
