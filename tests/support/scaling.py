"""Worker Deployments on a real API server for the autoscaler's tests: manifests, a replicas
timeline from a watch, a synthetic backlog, and the Events the operator posts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from pdfqueue_dev.processes import wait_until_async
from tests.support.kube_env import Cluster

WORKER_LABELS = {"app.kubernetes.io/component": "worker", "app.kubernetes.io/part-of": "pdfqueue"}


def worker_deployment(name: str, **annotations: str) -> dict[str, Any]:
    """A worker Deployment as the chart renders it with autoscaling on: no `replicas` set."""
    pod_labels = {"app.kubernetes.io/name": "pdfqueue", "pdfqueue.test/deployment": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": WORKER_LABELS,
            "annotations": {
                f"pdfqueue.io/{k.replace('_', '-')}": v for k, v in annotations.items()
            },
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": {**pod_labels, **WORKER_LABELS}},
                "spec": {
                    "nodeSelector": {"type": "kwok"},  # fake nodes: pods run without a kubelet
                    "containers": [{"name": "worker", "image": "registry.invalid/worker:test"}],
                },
            },
        },
    }


@dataclass
class Timeline:
    """Every value of spec.replicas the API server reported, with when it was seen."""

    seen: list[tuple[float, int]] = field(default_factory=list)

    def current(self) -> int | None:
        return self.seen[-1][1] if self.seen else None

    def changes(self) -> list[int]:
        """The values in order, repeats collapsed (every status update is an event too)."""
        values = [r for _, r in self.seen]
        return [r for i, r in enumerate(values) if i == 0 or values[i - 1] != r]

    def first(self, after: float, match: Any) -> float:
        return next(t for t, r in self.seen if t >= after and match(r))


@asynccontextmanager
async def watch_replicas(kube: Cluster, namespace: str, name: str) -> AsyncIterator[Timeline]:
    proc = await asyncio.create_subprocess_exec(
        kube.kubectl_bin,
        f"--kubeconfig={kube.kubeconfig}",
        *("get", "deployment", name, "-n", namespace, "--watch"),
        *("-o", 'jsonpath={.spec.replicas}{"\\n"}'),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    timeline = Timeline()

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            value = line.decode().strip().strip("'")
            if value.isdigit():
                timeline.seen.append((time.monotonic(), int(value)))

    reader = asyncio.create_task(read())
    try:
        yield timeline
    finally:
        proc.terminate()
        await proc.wait()
        reader.cancel()


async def replicas_become(timeline: Timeline, value: int, what: str, timeout_s: float) -> float:
    await wait_until_async(lambda: replicas_are(timeline, value), what, timeout_s, interval_s=0.05)
    return timeline.seen[-1][0]


async def replicas_are(timeline: Timeline, value: int) -> bool:
    return timeline.current() == value


async def ready_pods(kube: Cluster, namespace: str, name: str, count: int) -> list[dict[str, Any]]:
    async def probe() -> list[dict[str, Any]] | None:
        out = await kube.kubectl(
            "get", "pods", "-n", namespace, "-l", f"pdfqueue.test/deployment={name}", "-o", "json"
        )
        pods = [
            p for p in json.loads(out.out)["items"] if not p["metadata"].get("deletionTimestamp")
        ]
        ready = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions", [])
            )
        ]
        return ready if len(pods) == len(ready) == count else None

    return await wait_until_async(probe, f"{count} ready pods", 60)


async def backlog(redis: Redis, queue: str, jobs: range) -> None:
    """Jobs as arq leaves them in its sorted set: ready (or running) means a score in the past."""
    now_ms = int(time.time() * 1000)
    await redis.zadd(queue, {f"process:fake:{i}": now_ms - 1000 for i in jobs})


async def events(kube: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out = await kube.kubectl(
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name}",
        "-o",
        "json",
    )
    found: list[dict[str, Any]] = json.loads(out.out)["items"]
    return found
