"""Worker autoscaling against a real API server: pods on kwok nodes follow a synthetic backlog."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.models import BatchStatus
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.kubeapi import connect
from pdfqueue.stores.redis.fair_dispatch import Dispatcher
from pdfqueue.stores.redis.queue import Job
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import wait_until_async
from pdfqueue_operator.kube import Kube
from pdfqueue_operator.model import PdfBatchObject
from pdfqueue_operator.runtime import Operator
from pdfqueue_operator.worker_scaler import WorkerDeployment
from tests.support.helpers import MakeCorpus
from tests.support.kube_env import Cluster, StartOperator
from tests.support.scaling import (
    backlog,
    events,
    ready_pods,
    replicas_are,
    replicas_become,
    watch_replicas,
    worker_deployment,
)

pytestmark = pytest.mark.kube
EXAMPLE = Path(__file__).parents[1] / "k8s" / "examples" / "pdfbatch.yaml"


def pdfbatch_manifest(source: str, name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    manifest["spec"]["source"] = source
    manifest["metadata"]["name"] = name
    return manifest


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


async def test_workers_go_from_zero_to_n_and_back_respecting_the_window(
    kube: Cluster, namespace: str, start_operator: StartOperator, redis: Redis, settings: Settings
) -> None:
    window_s, cooldown_s, tick_s = 5.0, 8.0, 0.25
    # The operator saw the old backlog last at most one tick gap before it changed; a loaded
    # machine stretches that gap, hence a margin of a second rather than of one tick.
    margin_s = 1.0
    queue = settings.queue_name
    manifest = worker_deployment(
        "workers",
        queue=queue,
        min_replicas="0",
        max_replicas="4",
        target_per_replica="5",
        scale_down_stabilization_seconds=str(window_s),
        idle_cooldown_seconds=str(cooldown_s),
    )
    await kube.apply(manifest, namespace=namespace)
    operator = await start_operator(namespace)
    async with watch_replicas(kube, namespace, "workers") as timeline:
        await wait_until_async(lambda: replicas_are(timeline, 0), "watched", 10)
        await asyncio.sleep(4 * tick_s)  # the operator has looked: nothing to do
        assert timeline.current() == 0

        await backlog(redis, queue, range(12))  # ceil(12 / 5) = 3 replicas
        await replicas_become(timeline, 3, "scaled up", 15)
        pods = await ready_pods(kube, namespace, "workers", 3)
        busy = pods[1]["metadata"]["name"]
        await redis.set(keys.worker_heartbeat(busy), 4, ex=120)  # that pod runs 4 jobs

        shrink_at = time.monotonic()
        await redis.zrem(queue, *(f"process:fake:{i}" for i in range(8)))  # 4 left: 1 replica
        await replicas_become(timeline, 1, "scaled down", window_s + 20)
        dropped_at = timeline.first(shrink_at, lambda r: r < 3)
        assert dropped_at - shrink_at >= window_s - margin_s
        survivors = await ready_pods(kube, namespace, "workers", 1)
        assert [p["metadata"]["name"] for p in survivors] == [busy]
        assert survivors[0]["metadata"]["annotations"][DELETION_COST] == "4"

        drain_at = time.monotonic()
        await redis.delete(queue)
        await replicas_become(timeline, 0, "scaled to zero", cooldown_s + 20)
        zero_at = timeline.first(drain_at, lambda r: r == 0)
        assert zero_at - drain_at >= cooldown_s - margin_s
        assert timeline.changes() == [0, 3, 1, 0]

    reasons = [e["reason"] for e in await events(kube, namespace, "workers")]
    assert reasons.count("ScaledUp") == 1
    assert reasons.count("ScaledDown") == 2
    async with httpx.AsyncClient() as http:
        metrics = (await http.get(f"http://127.0.0.1:{operator.metrics_port}/metrics")).text
    assert 'pdfqueue_operator_scaling_decisions_total{direction="up"} 1.0' in metrics
    assert 'pdfqueue_operator_scaling_decisions_total{direction="down"} 2.0' in metrics
    assert "pdfqueue_operator_desired_replicas 0.0" in metrics


async def test_a_deployment_an_hpa_scales_or_with_bad_annotations_is_left_alone(
    kube: Cluster, namespace: str, start_operator: StartOperator, redis: Redis, settings: Settings
) -> None:
    queue = settings.queue_name
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "cpu"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "owned"},
            "minReplicas": 1,
            "maxReplicas": 3,
        },
    }
    await kube.apply(
        worker_deployment("owned", queue=queue, target_per_replica="5"),
        worker_deployment("typo", queue=queue, max_replicas="ten"),
        hpa,
        namespace=namespace,
    )
    await backlog(redis, queue, range(10))
    await start_operator(namespace)

    async def warned(name: str, reason: str) -> dict[str, Any] | None:
        return next((e for e in await events(kube, namespace, name) if e["reason"] == reason), None)

    conflict = await wait_until_async(
        lambda: warned("owned", "ScalingConflict"), "conflict reported"
    )
    assert conflict["type"] == "Warning"
    assert "HorizontalPodAutoscaler cpu targets this Deployment" in conflict["message"]
    typo = await wait_until_async(
        lambda: warned("typo", "InvalidScalingAnnotation"), "typo reported"
    )
    assert "pdfqueue.io/max-replicas: 'ten' is not an integer" in typo["message"]
    for name in ("owned", "typo"):
        deployment = await kube.get("deployment", name, namespace)
        assert deployment is not None
        assert deployment["spec"]["replicas"] == 0

    # Once the HPA is gone, the operator takes over (so the refusal was the HPA's doing).
    await kube.kubectl("delete", "hpa", "cpu", "-n", namespace)
    async with watch_replicas(kube, namespace, "owned") as timeline:
        await replicas_become(timeline, 2, "scaled once the HPA is gone", 15)


async def test_pending_work_not_yet_released_scales_the_fleet_out(
    kube: Cluster, namespace: str, start_operator: StartOperator, redis: Redis, settings: Settings
) -> None:
    """A big batch sits mostly in fair dispatch's pending work: the operator still counts it."""
    queue = settings.queue_name
    await kube.apply(
        worker_deployment("workers", queue=queue, max_replicas="4", target_per_replica="5"),
        namespace=namespace,
    )
    batch_id = uuid.uuid4().hex
    await redis.hset(keys.batch(batch_id), mapping={"status": "PROCESSING", "tenant": "acme"})
    jobs = [
        Job(keys.process_job(batch_id, i), "process", {"batch_id": batch_id}) for i in range(14)
    ]
    await Dispatcher(redis, queue).register(batch_id, "acme", jobs, chunk=100)
    await backlog(redis, queue, range(1))  # one released job: 15 in all, ceil(15 / 5) = 3
    assert await redis.zcard(queue) == 1
    await start_operator(namespace)
    async with watch_replicas(kube, namespace, "workers") as timeline:
        await replicas_become(timeline, 3, "scaled out for pending work", 20)


async def test_a_deleted_pdfbatch_that_never_ran_scales_the_workers_back_as_fast_as_a_finished_one(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    storage: Storage,
    settings: Settings,
) -> None:
    """No worker ever runs: the batch's ingest is queued, the fleet scales up for it, and the
    object is deleted. The cancel drops the ingest, so the fleet goes back to zero after the
    same window and cooldown as after a batch that finished."""
    window_s = cooldown_s = 5.0
    await kube.apply(
        worker_deployment(
            "workers",
            queue=settings.queue_name,
            min_replicas="0",
            max_replicas="2",
            target_per_replica="5",
            scale_down_stabilization_seconds=str(window_s),
            idle_cooldown_seconds=str(cooldown_s),
        ),
        namespace=namespace,
    )
    _, path = await make_corpus(3, seed=5)
    await storage.put("incoming/hr/never-ran.zip", path.read_bytes())
    await start_operator(namespace)
    async with watch_replicas(kube, namespace, "workers") as timeline:
        await kube.apply(
            pdfbatch_manifest(storage.url("incoming/hr/never-ran.zip"), "never-ran"),
            namespace=namespace,
        )
        await replicas_become(timeline, 1, "scaled up for the ingest", 20)
        await kube.kubectl("delete", "pdfbatch", "never-ran", "-n", namespace)
        deleted_at = time.monotonic()
        await replicas_become(
            timeline, 0, "scaled to zero after the cancel", window_s + cooldown_s + 20
        )
        assert timeline.first(deleted_at, lambda r: r == 0) - deleted_at < window_s + cooldown_s + 5


async def test_a_deletion_kopf_never_delivered_still_cancels_and_scales_the_workers_back(
    kube: Cluster,
    namespace: str,
    operator_kubeconfig: Path,
    make_corpus: MakeCorpus,
    storage: Storage,
    settings: Settings,
    redis: Redis,
) -> None:
    """kopf delivers no DELETED for an object deleted while its watch was restarting (a 410
    makes it list again, and a list shows no deletion), and never runs a failed event handler
    again. The status loop is what then finds the object gone. Here the operator's loops run
    without kopf, so no DELETED handler ever runs: a batch no worker ever ran never changes,
    and the loop must still look at its object, cancel it, and let the fleet go back to zero
    within the window, the cooldown and one period of each loop."""
    window_s = cooldown_s = 5.0
    tick_s = 0.25  # both loops' period, as start_operator sets them
    await kube.apply(
        worker_deployment(
            "workers",
            queue=settings.queue_name,
            min_replicas="0",
            max_replicas="2",
            target_per_replica="5",
            scale_down_stabilization_seconds=str(window_s),
            idle_cooldown_seconds=str(cooldown_s),
        ),
        namespace=namespace,
    )
    _, path = await make_corpus(3, seed=5)
    await storage.put("incoming/hr/unheard.zip", path.read_bytes())
    await kube.apply(
        pdfbatch_manifest(storage.url("incoming/hr/unheard.zip"), "unheard"), namespace=namespace
    )
    body = await kube.get("pdfbatch", "unheard", namespace)
    deployment = await kube.get("deployment", "workers", namespace)
    assert body is not None
    assert deployment is not None
    obj = PdfBatchObject.from_body(body)
    config = settings.model_copy(
        update={
            "operator_namespace_tenants": {namespace: "hr"},
            "operator_scale_interval_s": tick_s,
            "operator_status_interval_s": tick_s,
        }
    )
    index = {(namespace, "workers"): [WorkerDeployment.from_body(deployment)]}
    client = Kube(await connect(str(operator_kubeconfig)))
    operator = await Operator.start(config, index, {}, client=client)  # type: ignore[arg-type]
    try:
        async with watch_replicas(kube, namespace, "workers") as timeline:
            await operator.reconciler.ensure(obj)  # what the create handler does
            await replicas_become(timeline, 1, "scaled up for the ingest", 20)

            async def shown() -> bool:
                found = await kube.get("pdfbatch", "unheard", namespace)
                return bool(found and (found.get("status") or {}).get("batchId") == obj.own_id)

            await wait_until_async(shown, "its PENDING status written", 20)
            await kube.kubectl("delete", "pdfbatch", "unheard", "-n", namespace)
            await replicas_become(
                timeline,
                0,
                "scaled to zero after the deletion",
                window_s + cooldown_s + 2 * tick_s,  # the status loop finds it, the scaler acts
            )
        found = await operator.reconciler.lifecycle.reads.read(obj.own_id)
        assert found is not None
        assert found.summary.status is BatchStatus.CANCELLED
        assert await redis.zscore(settings.queue_name, keys.ingest_job(obj.own_id)) is None
    finally:
        await operator.close()
