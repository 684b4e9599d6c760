"""The operator's long-lived clients and its two loops, built at kopf startup and kept in memo.

The loops are plain tasks, not kopf timers: a kopf timer or daemon puts a finalizer on every
object it runs for, and a finalizer would block `kubectl delete` while the operator is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg
import kopf
from redis.asyncio import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.observability import metrics
from pdfqueue.stores.db import Database, connect
from pdfqueue.stores.storage import Storage
from pdfqueue_operator import kube
from pdfqueue_operator.autoscaler import Autoscaler, Key, WorkerDeployment
from pdfqueue_operator.reconcile import BatchReconciler

log = logging.getLogger(__name__)
STALE_TICKS = 20
"""A loop this many intervals behind fails the liveness probe (and the pod is restarted)."""


@dataclass
class Loop:
    """Run `step` every `interval_s` forever; a failing step is logged and tried again."""

    name: str
    interval_s: float
    step: Callable[[], Awaitable[None]]
    last_ok: float = field(default_factory=time.monotonic)
    task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.step(), timeout=max(30.0, 10 * self.interval_s))
            except Exception:
                log.exception("%s loop: step failed", self.name)
            else:
                self.last_ok = time.monotonic()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"pdfqueue-{self.name}")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def check(self) -> float:
        """Seconds since the last good step; raises (failing the probe) when far too long."""
        age = time.monotonic() - self.last_ok
        if age > STALE_TICKS * self.interval_s + 30:
            raise kopf.PermanentError(f"the {self.name} loop has not completed for {age:.0f}s")
        return round(age, 1)


@dataclass
class Operator:
    settings: Settings
    redis: Redis
    pool: asyncpg.Pool
    storage: Storage
    kube: kube.Kube
    reconciler: BatchReconciler
    loops: list[Loop]

    @classmethod
    async def start(
        cls,
        settings: Settings,
        deployments: kopf.Index[Key, WorkerDeployment],
        hpas: kopf.Index[Key, str],
    ) -> Operator:
        redis = Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=5)
        pool = await connect(settings.database_url, min_size=1, max_size=4)
        storage = Storage.from_settings(settings, threads=4)
        client = kube.Kube(await kube.connect(settings.kubeconfig))
        db = Database(pool, settings.users_table)
        reconciler = BatchReconciler(
            settings,
            redis,
            db,
            Lifecycle.of(db, redis, settings),
            storage,
            client,
            own_namespace=kube.own_namespace(),
        )
        autoscaler = Autoscaler(settings, redis, client, deployments, hpas)
        loops = [
            Loop("autoscaler", settings.operator_scale_interval_s, autoscaler.tick),
            Loop("status", settings.operator_status_interval_s, reconciler.mirror),
        ]
        for loop in loops:
            loop.start()
        metrics.register("operator")
        metrics.serve(settings.metrics_port)
        return cls(settings, redis, pool, storage, client, reconciler, loops)

    def health(self) -> dict[str, float]:
        return {f"{loop.name}_age_s": loop.check() for loop in self.loops}

    async def close(self) -> None:
        for loop in self.loops:
            await loop.stop()
        await self.kube.close()
        await self.storage.aclose()
        await self.pool.close()
        await self.redis.aclose()
