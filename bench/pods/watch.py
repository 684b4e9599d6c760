"""The pods bench's watcher: Deployment, pods, backlog, progress and pod cgroups, every tick."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from redis.asyncio import Redis

from bench.pods.stats import PodRecord, Point, Timeline, pod_facts, read_pod
from pdfqueue.domain.models import TERMINAL
from pdfqueue.stores.redis.fair_dispatch import pending_jobs


@dataclass(frozen=True)
class KubeAccess:
    """The API server's address and the admin's client certificate, from the node's PKI."""

    server: str
    ca: Path
    cert: Path
    key: Path

    @classmethod
    def from_node(cls, node_dir: Path) -> KubeAccess:
        config = yaml.safe_load((node_dir / "admin.kubeconfig").read_text())
        pki = node_dir / "pki"
        server = config["clusters"][0]["cluster"]["server"]
        return cls(server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")

    def client(self) -> httpx.AsyncClient:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return httpx.AsyncClient(base_url=self.server, verify=context, timeout=10)


@dataclass
class Target:
    """What to watch: the release's namespace and worker Deployment, its Redis and API."""

    namespace: str
    deployment: str
    redis_url: str
    queue: str
    api_url: str
    token: str


@dataclass
class Watcher:
    """Samples every `every_s` in a thread of its own until stopped; the main thread uploads and
    marks the batch (`batch_id`, `t0`), the watcher marks its completion."""

    kube: KubeAccess
    target: Target
    every_s: float = 0.5
    timeline: Timeline = field(default_factory=Timeline)
    records: dict[str, PodRecord] = field(default_factory=dict)
    batch_id: str | None = None
    final: dict[str, Any] | None = None
    t0: float = field(default_factory=time.monotonic)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    completed: threading.Event = field(default_factory=threading.Event)
    zero: threading.Event = field(default_factory=threading.Event)
    """Set once the batch is done and no worker is wanted or left."""

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._loop()), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)

    async def _loop(self) -> None:
        ns, t = self.target.namespace, self.target
        redis = Redis.from_url(t.redis_url)
        headers = {"Authorization": f"Bearer {t.token}"}
        async with (
            self.kube.client() as kube,
            httpx.AsyncClient(base_url=t.api_url, headers=headers, timeout=10) as api,
        ):
            first = True
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    await self._tick(kube, api, redis, ns, baseline=first)
                    first = False
                except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
                    self.errors.append(f"{time.monotonic() - self.t0:.1f}s: {exc!r}")
                await asyncio.sleep(max(0.0, self.every_s - (time.monotonic() - started)))
        await redis.aclose()

    async def _tick(
        self,
        kube: httpx.AsyncClient,
        api: httpx.AsyncClient,
        redis: Redis,
        ns: str,
        *,
        baseline: bool,
    ) -> None:
        dep = await kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{self.target.deployment}")
        dep.raise_for_status()
        pods = (await kube.get(f"/api/v1/namespaces/{ns}/pods")).json()["items"]
        workers = 0
        for pod in pods:
            facts = pod_facts(pod)
            if facts["component"] == "worker" and not facts["terminating"]:
                workers += 1
            self._see(facts, pod.get("status", {}).get("phase"), baseline)
        now_ms = int(time.time() * 1000)
        backlog = int(await redis.zcount(self.target.queue, "-inf", now_ms))
        backlog += await pending_jobs(redis, self.target.queue)
        status = await self._status(api)
        spec, state = dep.json()["spec"], dep.json().get("status", {})
        t_s = round(time.monotonic() - self.t0, 2)
        self.timeline.points.append(
            Point(
                t_s,
                int(spec.get("replicas") or 0),
                int(state.get("readyReplicas") or 0),
                workers,
                backlog,
                int(status.get("processed", 0)),
                int(status.get("linked", 0)),
            )
        )
        if status.get("status") in TERMINAL and not self.completed.is_set():
            self.final = status
            self.timeline.completed_s = t_s
            for record in self.records.values():  # read earlier in this same tick
                record.mark_completed()
            self.completed.set()
        last = self.timeline.points[-1]
        if self.completed.is_set() and last.desired == 0 and last.pods == 0:
            self.zero.set()

    def _see(self, facts: dict[str, Any], phase: str | None, baseline: bool) -> None:
        record = self.records.get(facts["uid"])
        if record is None:
            record = self.records[facts["uid"]] = PodRecord(
                facts["name"], facts["component"], facts["limit_bytes"]
            )
        record.oom_killed |= facts["oom_killed"]
        record.restarts = max(record.restarts, facts["restarts"])
        if phase in ("Succeeded", "Failed"):  # its cgroup is gone
            return
        reading = read_pod(facts["uid"], facts["qos"])
        if reading is not None:
            record.see(reading, baseline)

    async def _status(self, api: httpx.AsyncClient) -> dict[str, Any]:
        if self.batch_id is None:
            return {}
        response = await api.get(f"/v1/batches/{self.batch_id}")
        response.raise_for_status()
        status: dict[str, Any] = response.json()
        return status
