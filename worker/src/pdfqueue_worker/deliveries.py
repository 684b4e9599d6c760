"""The delivery slots of a worker process: an arq worker of their own, on the delivery queue.

Webhook deliveries wait on the network, not on a parser, and a hostile receiver can make each
attempt last its whole deadline. So they never take one of the `worker_max_jobs` PDF slots:
every worker process also runs `webhook_concurrency` delivery slots, fed by fair dispatch over
the delivery queue (at most `webhook_tenant_concurrency` of one tenant's deliveries in flight,
tenants taking turns). Deliveries stay durable as arq jobs and pending work in Redis: a
delivery cut off by a shutdown runs again on whichever worker is next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from arq import Worker, func

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.observability.periodic import Periodic
from pdfqueue.stores.redis.client import arq_settings
from pdfqueue.stores.redis.fair_dispatch import Dispatcher, dispatch_ticker, pending_jobs
from pdfqueue.stores.redis.queue import deserialize, serialize
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.tasks.webhook import MAX_TRIES, webhook

log = logging.getLogger(__name__)
MAX_RECONNECT_DELAY_S = 30.0
MIN_POLL_DELAY_S = 0.25
"""Deliveries are off the PDFs' throughput path: a quarter second to pick one up is plenty,
and keeps an idle worker's polls of the delivery queue to four a second."""


def build_delivery_worker(settings: Settings, deps: Deps) -> Worker:
    """The arq worker of the delivery slots; signals are the PDF worker's to handle."""
    return Worker(
        [
            func(
                webhook,
                name="webhook",
                timeout=settings.webhook_timeout_s + 10,
                max_tries=MAX_TRIES,
            )
        ],
        queue_name=keys.delivery_queue(settings.queue_name),
        redis_settings=arq_settings(settings),
        max_jobs=settings.webhook_concurrency,
        poll_delay=max(settings.worker_poll_delay_s, MIN_POLL_DELAY_S),
        keep_result=settings.batch_ttl_s,
        job_serializer=serialize,
        job_deserializer=deserialize,
        handle_signals=False,
        ctx={"settings": settings, "deps": deps},
        health_check_interval=10,
    )


@dataclass
class Deliveries:
    """Runs the delivery worker (again after a lost Redis) and its dispatch tick."""

    settings: Settings
    deps: Deps
    worker: Worker | None = None
    task: asyncio.Task[None] | None = None
    ticker: Periodic | None = None
    paused: bool = field(default=False)

    def start(self) -> None:
        self.task = asyncio.create_task(self._serve(), name="deliveries")
        dispatcher = Dispatcher.for_deliveries(self.deps.redis, self.settings)
        self.ticker = dispatch_ticker(
            dispatcher, self.settings.dispatch_tick_s, self.settings.webhook_concurrency
        )
        self.ticker.start()

    async def _serve(self) -> None:
        delay = 1.0
        while True:
            self.worker = build_delivery_worker(self.settings, self.deps)
            self.worker.allow_pick_jobs = not self.paused
            try:
                await self.worker.main()
            except Exception as exc:  # like the PDF worker: wait for Redis, then reconnect
                log.error("deliveries lost Redis (%r); reconnecting in %.0fs", exc, delay)
            finally:
                try:
                    await self.worker.close()
                except Exception as exc:  # Redis may be what is gone
                    log.warning("closing the delivery worker failed: %r", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RECONNECT_DELAY_S)

    def pause(self) -> None:
        """Take no new delivery (the process is shutting down); running ones go on."""
        self.paused = True
        if self.worker is not None:
            self.worker.allow_pick_jobs = False

    async def drain(self) -> None:
        """Wait until no delivery is left (burst mode: the tests' workers)."""
        while await self._left():  # noqa: ASYNC110 (Redis, not this process, knows when)
            await asyncio.sleep(max(self.settings.worker_poll_delay_s, 0.01))

    async def _left(self) -> bool:
        queue, redis = keys.delivery_queue(self.settings.queue_name), self.deps.redis
        if self.worker is not None and self.worker.tasks:
            return True
        return bool(await redis.zcard(queue) or await pending_jobs(redis, queue))

    async def stop(self) -> None:
        """Cut running deliveries off (arq queues them again: another worker retries them)."""
        if self.ticker is not None:
            await self.ticker.stop()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
