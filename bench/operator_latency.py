"""`python -m bench.operator_latency`: seconds from a queue backlog appearing to replicas set.

Runs the real operator (`pdfqueue operator`, as its own ServiceAccount, default settings)
against the loopback control plane of tools/kube.sh with a worker Deployment on kwok's fake
nodes. Each trial waits for zero replicas, adds a backlog to the queue at a random moment of
the operator's tick, and times until a `kubectl --watch` sees `spec.replicas` change. Target:
under 5 s. For scale, KEDA polls every 30 s by default (`pollingInterval`).

Needs the services env (`eval "$(tools/services.sh env .state)"`) and the cached binaries.
PDFQUEUE_KUBE_REUSE=DIR uses a control plane already up (`tools/kube.sh up DIR`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml
from redis.asyncio import Redis

from pdfqueue_dev.processes import free_port, wait_until_async

ROOT = Path(__file__).resolve().parents[1]
KUBECTL = str(
    Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools")) / "bin/kubectl"
)
TARGET_S = 5.0


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [KUBECTL, f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 and "AlreadyExists" not in done.stderr:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout


def control_plane(state: Path) -> tuple[Path, float]:
    """Start tools/kube.sh in `state`; returns the admin kubeconfig and how long it took."""
    env = os.environ | {
        "PDFQUEUE_KUBE_PORT": str(free_port()),
        "PDFQUEUE_ETCD_PORT": str(free_port()),
        "PDFQUEUE_ETCD_PEER_PORT": str(free_port()),
    }
    started = time.monotonic()
    subprocess.run(["bash", str(ROOT / "tools/kube.sh"), "up", str(state)], env=env, check=True)
    return state / "admin.kubeconfig", time.monotonic() - started


def grant_operator(admin: Path, namespace: str) -> None:
    """The operator's namespaced Role and RoleBinding (k8s/rbac/operator.yaml), also in
    `namespace`: it may act only where it is granted to, as in a cluster."""
    for doc in yaml.safe_load_all((ROOT / "k8s/rbac/operator.yaml").read_text()):
        if doc and doc["kind"] in {"Role", "RoleBinding"}:
            doc["metadata"]["namespace"] = namespace
            kubectl(admin, "apply", "-f", "-", stdin=json.dumps(doc))


def operator_kubeconfig(admin: Path, path: Path) -> Path:
    kubectl(admin, "create", "namespace", "pdfqueue")
    for manifest in ("k8s/crds/pdfbatches.pdfqueue.io.yaml", "k8s/rbac/operator.yaml"):
        kubectl(admin, "apply", "-f", str(ROOT / manifest))
    token = kubectl(admin, "create", "token", "pdfqueue-operator", "-n", "pdfqueue").strip()
    config = yaml.safe_load(kubectl(admin, "config", "view", "--raw"))
    config["users"] = [{"name": "operator", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "operator"
    path.write_text(yaml.safe_dump(config))
    return path


def deployment(queue: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/component": "worker", "app.kubernetes.io/part-of": "pdfqueue"}
    pods = {"app.kubernetes.io/name": "pdfqueue-bench"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "workers",
            "labels": labels,
            "annotations": {
                "pdfqueue.io/queue": queue,
                "pdfqueue.io/target-per-replica": "10",
                "pdfqueue.io/max-replicas": "5",
                # back to zero at once between trials; the window is not what is measured
                "pdfqueue.io/scale-down-stabilization-seconds": "0",
                "pdfqueue.io/idle-cooldown-seconds": "0",
            },
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": pods},
            "template": {
                "metadata": {"labels": pods | labels},
                "spec": {
                    "nodeSelector": {"type": "kwok"},
                    "containers": [{"name": "worker", "image": "registry.invalid/worker:bench"}],
                },
            },
        },
    }


class Replicas:
    """spec.replicas as a kubectl watch reports it, with the time each value arrived."""

    def __init__(self, admin: Path, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.value: int | None = None
        self.changed = asyncio.Event()
        self.at = 0.0

    async def run(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            f"--kubeconfig={self.admin}",
            *("get", "deployment", "workers", "-n", self.namespace, "--watch"),
            *("-o", 'jsonpath={.spec.replicas}{"\\n"}'),
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            async for line in proc.stdout:
                text = line.decode().strip()
                if text.isdigit() and int(text) != self.value:
                    self.value, self.at = int(text), time.monotonic()
                    self.changed.set()
        finally:
            proc.terminate()

    async def until(self, predicate: Any, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while self.value is None or not predicate(self.value):
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), max(deadline - time.monotonic(), 0.01))


async def trials(admin: Path, op_kubeconfig: Path, n: int, interval_s: float | None) -> list[float]:
    namespace, queue = f"bench-{uuid.uuid4().hex[:6]}", f"pdfqueue-bench:{uuid.uuid4().hex[:6]}"
    kubectl(admin, "create", "namespace", namespace)
    grant_operator(admin, namespace)
    kubectl(admin, "apply", "-n", namespace, "-f", "-", stdin=json.dumps(deployment(queue)))
    health = free_port()
    env = os.environ | {
        "KUBECONFIG": str(op_kubeconfig),
        "PDFQUEUE_KUBECONFIG": str(op_kubeconfig),
        "PDFQUEUE_OPERATOR_HEALTH_PORT": str(health),
        "PDFQUEUE_METRICS_PORT": "0",
    }
    if interval_s is not None:
        env["PDFQUEUE_OPERATOR_SCALE_INTERVAL_S"] = str(interval_s)
    command = ["-m", "pdfqueue.cli.main", "operator", "--standalone", f"--namespace={namespace}"]
    operator = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    redis = Redis.from_url(os.environ["PDFQUEUE_REDIS_URL"])
    replicas = Replicas(admin, namespace)
    watcher = asyncio.create_task(replicas.run())
    latencies: list[float] = []
    try:
        async with httpx.AsyncClient() as http:

            async def healthy() -> bool:
                try:
                    return (await http.get(f"http://127.0.0.1:{health}/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            up: bool = await wait_until_async(
                healthy, "the operator's /healthz", 60, interval_s=0.1
            )
            assert up
        for _ in range(n):
            await replicas.until(lambda r: r == 0)
            await asyncio.sleep(random.uniform(1.0, 2.0))  # any phase of the tick
            now_ms = int(time.time() * 1000)
            started = time.monotonic()
            await redis.zadd(queue, {f"bench:{i}": now_ms for i in range(25)})
            await replicas.until(lambda r: r > 0)
            latencies.append(replicas.at - started)
            await redis.delete(queue)
    finally:
        watcher.cancel()
        operator.terminate()
        await operator.wait()
        await redis.delete(queue)
        await redis.aclose()
        kubectl(admin, "delete", "namespace", namespace, "--wait=false")
    return latencies


def summary(label: str, values: list[float]) -> str:
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values * 9
    ok = "OK" if max(values) < TARGET_S else "OVER TARGET"
    return (
        f"{label}: n={len(values)} min={min(values):.2f}s median={statistics.median(values):.2f}s"
        f" p90={q[8]:.2f}s max={max(values):.2f}s (target < {TARGET_S:g}s: {ok})"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.operator_latency", description=__doc__)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--intervals", default="default,0.25", help="scale intervals to try (s)")
    args = p.parse_args(argv)
    reuse = os.environ.get("PDFQUEUE_KUBE_REUSE")
    with tempfile.TemporaryDirectory(prefix="pdfqueue-bench-kube-") as tmp:
        state = Path(reuse or tmp)
        if reuse:
            admin, took = state / "admin.kubeconfig", 0.0
        else:
            admin, took = control_plane(state)
            print(f"control plane up in {took:.1f}s")
        try:
            op_kubeconfig = operator_kubeconfig(admin, Path(tmp) / "operator.kubeconfig")
            for interval in args.intervals.split(","):
                value = None if interval == "default" else float(interval)
                latencies = asyncio.run(trials(admin, op_kubeconfig, args.trials, value))
                label = "default interval (1 s)" if value is None else f"interval {value:g} s"
                print(summary(f"backlog -> replicas, {label}", latencies))
        finally:
            if not reuse:
                subprocess.run(
                    ["bash", str(ROOT / "tools/kube.sh"), "down", str(state)], check=False
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
