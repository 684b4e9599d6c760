"""The operator's long-lived clients and its loops, built at kopf startup and kept in memo.

kopf itself runs only in the leader (pdfqueue_operator.process), so startup happens once per
term. The loops are plain tasks, not kopf timers: a kopf timer or daemon puts a finalizer on
every object it runs for, and a finalizer would block `kubectl delete` while the operator is
down. They run as leader tasks (leader_tasks.py), beside those other modules register.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial

import kopf

from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.recovery import reconcile_running
from pdfqueue.runtime.connections import OPERATOR, Stores
from pdfqueue.stores import kubeapi
from pdfqueue.stores.postgres.retention import RetentionStore
from pdfqueue_operator import kube
from pdfqueue_operator.kube import Kube, always
from pdfqueue_operator.leader_tasks import (
    LEADER_TASKS,
    LeaderContext,
    LeaderTasks,
    Running,
    operator_loop,
)
from pdfqueue_operator.model import ObjectRef
from pdfqueue_operator.reconcile import BatchReconciler
from pdfqueue_operator.removed import RemovedBatches
from pdfqueue_operator.worker_scaler import Key, WorkerDeployment, WorkerScaler

log = logging.getLogger(__name__)
REBUILD_INTERVAL_S = 30.0
"""How often the leader looks for running batches whose Redis state or work is lost (the
workers look too, at start and when Redis's epoch key is gone; this catches the rest: a lagging
replica, a job deleted by hand, a worker fleet scaled to zero)."""


@dataclass
class Operator:
    settings: Settings
    stores: Stores
    kube: kube.Kube
    reconciler: BatchReconciler
    tasks: Running

    @classmethod
    async def start(
        cls,
        settings: Settings,
        deployments: kopf.Index[Key, WorkerDeployment],
        hpas: kopf.Index[Key, str],
        *,
        leading: Callable[[], bool] = always,
        identity: str | None = None,
        registry: LeaderTasks = LEADER_TASKS,
        stores: Stores | None = None,
        client: Kube | None = None,
        shown: Mapping[str, Iterable[ObjectRef]] | None = None,
    ) -> Operator:
        """`stores` and `client` built beforehand (by a standby, while it waits) are taken
        over and closed. `shown`: batch id -> the objects whose status shows it (an index)."""
        stores = stores or await Stores.open(settings, OPERATOR)
        if client is None:
            client = kube.Kube(await kubeapi.connect(settings.kubeconfig), leading, identity)
        reconciler = BatchReconciler(
            settings,
            stores.redis,
            stores.batches,
            stores.lifecycle,
            stores.storage,
            client,
            own_namespace=kubeapi.own_namespace(),
        )
        scaler = WorkerScaler(settings, stores.redis, client, deployments, hpas)
        removed = await RemovedBatches.start(
            RetentionStore.of(stores.pool, settings),
            client,
            {} if shown is None else shown,  # not `shown or {}`: an index empty now fills later
        )
        loops = [
            operator_loop("autoscaler", settings.operator_scale_interval_s, scaler.tick),
            operator_loop("status", settings.operator_status_interval_s, reconciler.mirror),
            operator_loop("removed", settings.operator_status_interval_s, removed.step),
            operator_loop(
                "redis-rebuild", REBUILD_INTERVAL_S, partial(reconcile_running, stores.lifecycle)
            ),
        ]
        metrics.register("operator")
        tasks = registry.start(LeaderContext(settings, stores, client), loops)
        return cls(settings, stores, client, reconciler, tasks)

    def health(self) -> dict[str, float]:
        return self.tasks.health()

    def halt(self) -> None:
        """Stop acting now (the term is over); `close` still cleans up afterwards."""
        self.tasks.halt()

    async def close(self) -> None:
        await self.tasks.stop()
        await self.kube.close()
        await self.stores.close()
