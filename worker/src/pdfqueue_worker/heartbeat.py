"""This worker's running-job count in Redis under its pod name, so scale-in removes idle pods.

The operator reads it just before lowering replicas and sets each pod's
`controller.kubernetes.io/pod-deletion-cost`; the ReplicaSet then deletes the cheapest pods.
The key expires (3 beats) when a worker dies, which then counts as idle.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.observability.periodic import Periodic

log = logging.getLogger(__name__)


def running_jobs() -> int:
    """Jobs this process runs now: the in-progress gauge every task keeps (see `observe`)."""
    return int(sum(s.value for m in metrics.JOBS_IN_PROGRESS.collect() for s in m.samples))


@dataclass
class Heartbeat:
    redis: Redis
    pod_name: str
    interval_s: float
    _loop: Periodic | None = field(default=None, init=False, repr=False)

    @property
    def key(self) -> str:
        return keys.worker_heartbeat(self.pod_name)

    async def beat(self) -> None:
        await self.redis.set(self.key, running_jobs(), px=int(self.interval_s * 3000))

    def start(self) -> None:
        # Redis down: the worker itself reconnects; the loop keeps beating
        self._loop = Periodic("heartbeat", self.interval_s, self.beat)
        self._loop.start()

    async def stop(self) -> None:
        if self._loop is not None:
            await self._loop.stop()
        with contextlib.suppress(Exception):
            await self.redis.delete(self.key)


def start(redis: Redis, settings: Settings) -> Heartbeat | None:
    """Start beating when this worker knows its pod name (HOSTNAME); None otherwise."""
    if not settings.pod_name:
        return None
    heartbeat = Heartbeat(redis, settings.pod_name, settings.worker_heartbeat_s)
    heartbeat.start()
    return heartbeat


async def stop(heartbeat: Heartbeat | None) -> None:
    if heartbeat is not None:
        await heartbeat.stop()
