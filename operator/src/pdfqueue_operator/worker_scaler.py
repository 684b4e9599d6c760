"""Worker autoscaling on queue depth: each tick, every indexed worker Deployment gets replicas.

The backlog is `ZCOUNT <queue> -inf <now ms>`. arq keeps a job in the queue's sorted set from
enqueue until it finishes, scored with the time it may start. Starting a job only sets its
in-progress key; the score stays. A try that ends in a retry is re-scored into the future
(`zincrby` by its delay); a finished job is removed. So the count up to now is exactly the
jobs that are ready or running, each once, and retries waiting out their backoff are left
out until they are due (no worker is needed for them before then). Running jobs are not
added again from anywhere else: counting in-progress keys as well would double count them.
A job whose worker was killed keeps its past score and so keeps counting until it is rerun.

Fair dispatch keeps most of a big batch out of the queue as pending work, released in small
windows; that work is added (`pdfqueue.stores.redis.fair_dispatch.pending_jobs`), so the fleet
still scales out for the whole backlog. Webhook deliveries due on their own queue are added as
well (they run in every worker's delivery slots), so a delivery never waits for the next batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.stores.redis.fair_dispatch import pending_jobs
from pdfqueue_operator.kube import Kube
from pdfqueue_operator.scale_decision import History, InvalidPolicy, ScalePolicy, decide

log = logging.getLogger(__name__)
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
Key = tuple[str, str]


@dataclass(frozen=True)
class WorkerDeployment:
    """What the index keeps of a worker Deployment (kopf updates it from the watch)."""

    namespace: str
    name: str
    uid: str
    annotations: tuple[tuple[str, str], ...]
    match_labels: tuple[tuple[str, str], ...]
    ready: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> WorkerDeployment:
        meta, spec = body["metadata"], body.get("spec") or {}
        return cls(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            annotations=tuple(sorted((meta.get("annotations") or {}).items())),
            match_labels=tuple(
                sorted(((spec.get("selector") or {}).get("matchLabels") or {}).items())
            ),
            ready=int((body.get("status") or {}).get("readyReplicas") or 0),
        )

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    @property
    def reference(self) -> dict[str, str]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
        }


@dataclass(eq=False)
class WorkerScaler:
    """Owns the replicas of the worker Deployments; kopf's indices say which exist."""

    settings: Settings
    redis: Redis
    kube: Kube
    deployments: kopf.Index[Key, WorkerDeployment]
    hpas: kopf.Index[Key, str]
    _history: dict[Key, History] = field(default_factory=dict, init=False)
    _refused: dict[Key, str] = field(default_factory=dict, init=False)
    """Why a Deployment is left alone, posted once."""

    async def tick(self) -> None:
        seen: set[Key] = set()
        for key in list(self.deployments):
            for deployment in list(self.deployments.get(key, ())):
                seen.add(key)
                try:
                    await self.scale(deployment)
                except Exception:  # the next tick tries again; one Deployment never blocks others
                    log.exception("could not scale %s/%s", *key)
        for gone in set(self._history) - seen:
            del self._history[gone]

    async def scale(self, deployment: WorkerDeployment) -> None:
        key = deployment.key
        try:
            policy = ScalePolicy.from_annotations(
                dict(deployment.annotations),
                queue=self.settings.queue_name,
                target_per_replica=self.settings.replica_jobs,
            )
        except InvalidPolicy as exc:
            await self.refuse(deployment, "InvalidScalingAnnotation", str(exc))
            return
        owners = sorted(self.hpas.get(key, ()))
        if owners:
            why = (
                f"HorizontalPodAutoscaler {', '.join(owners)} targets this Deployment; pdfqueue"
                " will not scale it too (remove the HPA or the pdfqueue.io labels)"
            )
            await self.refuse(deployment, "ScalingConflict", why)
            return
        self._refused.pop(key, None)

        now_ms = int(time.time() * 1000)
        ready = await self.redis.zcount(policy.queue, "-inf", now_ms)
        # deliveries due count too: only a running worker delivers them
        ready += await self.redis.zcount(keys.delivery_queue(policy.queue), "-inf", now_ms)
        backlog = int(ready) + await pending_jobs(self.redis, policy.queue)
        now = time.monotonic()  # when the backlog was seen: the window counts from here
        current = await self.kube.get_replicas(deployment.namespace, deployment.name)
        decision = decide(now, backlog, current, self._history.get(key), policy)
        self._history[key] = decision.history
        metrics.operator_observed(decision.desired, deployment.ready)
        if decision.desired == current:
            return
        if decision.desired < current:
            await self.order_scale_in(deployment)
        await self.kube.set_replicas(deployment.namespace, deployment.name, decision.desired)
        metrics.operator_scaled(current, decision.desired)
        log.info("%s/%s: %s", deployment.namespace, deployment.name, decision.reason)
        up = decision.desired > current
        await self.kube.event(
            deployment.reference, "Normal", "ScaledUp" if up else "ScaledDown", decision.reason
        )

    async def order_scale_in(self, deployment: WorkerDeployment) -> None:
        """Give each pod its running jobs as deletion cost: the ReplicaSet removes idle ones first.

        Workers publish their running-job count under their pod name (pdfqueue_worker's
        heartbeat); a pod without one (starting, stuck, or gone) costs 0.
        """
        pods = await self.kube.pods(deployment.namespace, dict(deployment.match_labels))
        if not pods:
            return
        names = [p.metadata.name for p in pods]
        counts = await self.redis.mget([keys.worker_heartbeat(n) for n in names])
        for pod, count in zip(pods, counts, strict=True):
            cost = str(int(count or 0))
            if (pod.metadata.annotations or {}).get(DELETION_COST) != cost:
                await self.kube.annotate_pod(
                    deployment.namespace, pod.metadata.name, {DELETION_COST: cost}
                )

    async def refuse(self, deployment: WorkerDeployment, reason: str, message: str) -> None:
        """Leave the Deployment alone, saying why once (log and Event) until the cause changes."""
        if self._refused.get(deployment.key) == message:
            return
        self._refused[deployment.key] = message
        self._history.pop(deployment.key, None)
        log.warning("%s/%s: %s", deployment.namespace, deployment.name, message)
        await self.kube.event(deployment.reference, "Warning", reason, message)
