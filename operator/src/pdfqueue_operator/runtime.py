"""The operator's long-lived clients and its two loops, built at kopf startup and kept in memo.

The loops are plain tasks, not kopf timers: a kopf timer or daemon puts a finalizer on every
object it runs for, and a finalizer would block `kubectl delete` while the operator is down.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import kopf

from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.observability.periodic import Periodic
from pdfqueue.recovery import reconcile_at_start
from pdfqueue.runtime.stores import OPERATOR, Stores
from pdfqueue_operator import kube
from pdfqueue_operator.autoscaler import Autoscaler, Key, WorkerDeployment
from pdfqueue_operator.reconcile import BatchReconciler

log = logging.getLogger(__name__)
STALE_TICKS = 20
"""A loop this many intervals behind fails the liveness probe (and the pod is restarted)."""


def operator_loop(name: str, interval_s: float, step: Callable[[], Awaitable[None]]) -> Periodic:
    """One of the operator's loops; a step that hangs is cut off and tried again."""
    return Periodic(name, interval_s, step, timeout_s=max(30.0, 10 * interval_s))


def check(loop: Periodic) -> float:
    """Seconds since the loop's last good step; raises (failing the probe) when far too long."""
    age = loop.age_s()
    if age > STALE_TICKS * loop.interval_s + 30:
        raise kopf.PermanentError(f"the {loop.name} loop has not completed for {age:.0f}s")
    return round(age, 1)


@dataclass
class Operator:
    settings: Settings
    stores: Stores
    kube: kube.Kube
    reconciler: BatchReconciler
    loops: list[Periodic]

    @classmethod
    async def start(
        cls,
        settings: Settings,
        deployments: kopf.Index[Key, WorkerDeployment],
        hpas: kopf.Index[Key, str],
    ) -> Operator:
        stores = await Stores.open(settings, OPERATOR)
        await reconcile_at_start(stores.lifecycle)
        client = kube.Kube(await kube.connect(settings.kubeconfig))
        reconciler = BatchReconciler(
            settings,
            stores.redis,
            stores.db,
            stores.lifecycle,
            stores.storage,
            client,
            own_namespace=kube.own_namespace(),
        )
        autoscaler = Autoscaler(settings, stores.redis, client, deployments, hpas)
        loops = [
            operator_loop("autoscaler", settings.operator_scale_interval_s, autoscaler.tick),
            operator_loop("status", settings.operator_status_interval_s, reconciler.mirror),
        ]
        for loop in loops:
            loop.start()
        metrics.register("operator")
        metrics.serve(settings.metrics_port)
        return cls(settings, stores, client, reconciler, loops)

    def health(self) -> dict[str, float]:
        return {f"{each.name}_age_s": check(each) for each in self.loops}

    async def close(self) -> None:
        for loop in self.loops:
            await loop.stop()
        await self.kube.close()
        await self.stores.close()
