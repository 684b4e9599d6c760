"""The pods bench's release: the real node, the chart installed with this checkout's images."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import yaml

from bench.pods.watch import Target
from pdfqueue.domain.settings import Settings
from pdfqueue_dev.corpora.samples import Corpus, seed_users
from pdfqueue_dev.proctree import snapshot
from pdfqueue_dev.realnode import chart_image_values, image_refs, node_env, run

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts/pdfqueue"
KUBE_SH = ROOT / "tools/kube.sh"
IMAGES_SH = ROOT / "tools/images.sh"
KIND_VALUES = ROOT / "k8s/kind-values.yaml"
"""The e2e's values: small requests, short scaling windows, an API token."""
BENCH_VALUES = ROOT / "bench/pods/values.yaml"
"""Over the e2e's: the S3 pod's objects in memory, as the local side's are, and the like."""
BIN = Path("/var/cache/pdfqueue-tools/bin")
RELEASE = "pdfqueue"
NODE_CANNOT = 3


def start_node(node_dir: Path) -> None:
    """`tools/kube.sh node-check` then `up --real-node` (idempotent: quick when it runs)."""
    env = node_env(node_dir)
    check = subprocess.run(
        ["bash", str(KUBE_SH), "node-check", str(node_dir)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=900,
    )
    if check.returncode != 0:
        raise SystemExit(f"no real node here: {check.stderr.strip()[-2000:]}")
    run("bash", KUBE_SH, "up", node_dir, "--real-node", timeout=3600, env=env)


def node_cpu_s(node_dir: Path) -> float:
    """CPU used so far by the node's own processes, the pods' outside: the control plane,
    kubelet, containerd, kube-proxy and CoreDNS (`tools/kube.sh`'s pidfiles), and each pod's
    containerd shim with what it reaped (runc, probes)."""
    procs = snapshot()
    pids = set()
    for pidfile in (node_dir / "run").glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pids.add(int(pidfile.read_text().split()[0]))
    pids |= {pid for pid, p in procs.items() if p.comm.startswith("containerd-shim")}
    return sum(procs[pid].cpu_s for pid in pids if pid in procs)


def stop_node(node_dir: Path) -> None:
    run("bash", KUBE_SH, "down", node_dir, timeout=600, env=node_env(node_dir))


@dataclass
class Release:
    """The chart in a fresh namespace; `kubectl`/`helm` on it, and its stores' addresses."""

    node_dir: Path
    namespace: str
    values: dict[str, Any]

    @property
    def kubeconfig(self) -> Path:
        return self.node_dir / "admin.kubeconfig"

    @property
    def token(self) -> str:
        token: str = yaml.safe_load(KIND_VALUES.read_text())["auth"]["apiTokens"]["e2e"]
        return token

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        return run(
            BIN / "kubectl", f"--kubeconfig={self.kubeconfig}", "-n", self.namespace, *args,
            timeout=timeout,
        )  # fmt: skip

    def get(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return out

    def secret(self, component: str, key: str) -> str:
        data = self.get("secret", f"{RELEASE}-{component}")["data"]
        return base64.b64decode(data[key]).decode()

    def pod_ip(self, name: str) -> str:
        return str(self.get("pod", name)["status"]["podIP"])

    @property
    def api_url(self) -> str:
        ip = self.get("service", f"{RELEASE}-api")["spec"]["clusterIP"]
        return f"http://{ip}:80"

    def database_url(self) -> str:
        password = self.secret("postgresql", "postgres-password")
        ip = self.pod_ip(f"{RELEASE}-postgresql-0")  # on the node's bridge, which we reach
        return f"postgresql://pdfqueue:{password}@{ip}:5432/pdfqueue"

    def config(self) -> dict[str, str]:
        """The settings ConfigMap every component reads (the one naming the queue)."""
        for cm in self.get("configmaps")["items"]:
            if "PDFQUEUE_QUEUE_NAME" in cm.get("data", {}):
                return dict(cm["data"])
        return {}

    def target(self) -> Target:
        password = self.secret("redis", "redis-password")
        ip = self.pod_ip(f"{RELEASE}-redis-0")
        queue = self.config().get("PDFQUEUE_QUEUE_NAME") or Settings().queue_name
        return Target(
            self.namespace,
            f"{RELEASE}-worker",
            f"redis://:{password}@{ip}:6379/0",
            queue,
            self.api_url,
            self.token,
        )

    async def seed(self, planned: Corpus) -> None:
        """The corpus's users in the release's PostgreSQL (its `users` table), refilled."""
        conn = await asyncpg.connect(self.database_url())
        try:
            await seed_users(conn, planned.users, table="users")
        finally:
            await conn.close()

    def wait_workers_gone(self, timeout_s: float) -> None:
        """Until the operator has scaled the workers to 0 and the last one has stopped."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dep = self.get("deployment", f"{RELEASE}-worker")
            pods = self.get("pods", "-l", "app.kubernetes.io/component=worker")["items"]
            if not dep["spec"].get("replicas") and not pods:
                return
            time.sleep(1)
        raise SystemExit(f"the workers did not scale to 0 in {timeout_s:.0f}s")

    def describe(self) -> dict[str, Any]:
        """What the run was measured on: the images and the values that matter."""
        worker = self.values["worker"]
        return {
            "images": {k: v["image"]["tag"] for k, v in self.values.items() if "image" in v},
            "worker_resources": yaml.safe_load(KIND_VALUES.read_text())["worker"]["resources"],
            "autoscaling": worker["autoscaling"],
            "stores": "the chart's own Redis, PostgreSQL and S3 (versitygw) pods",
            "bench_values": yaml.safe_load(BENCH_VALUES.read_text()),
        }

    @classmethod
    @contextlib.contextmanager
    def install(cls, node_dir: Path, max_workers: int) -> Iterator[Release]:
        """`helm install --wait` in a new namespace; uninstalled and the namespace deleted after."""
        values = chart_image_values(image_refs(IMAGES_SH, run))
        scaling = yaml.safe_load(KIND_VALUES.read_text())["worker"]["autoscaling"]
        values["worker"]["autoscaling"] = {**scaling, "maxReplicas": max_workers}
        release = cls(node_dir, f"pdfq-bench-{uuid.uuid4().hex[:6]}", values)
        path = node_dir / f"{release.namespace}-values.yaml"
        path.write_text(yaml.safe_dump(values))
        kubectl = (BIN / "kubectl", f"--kubeconfig={release.kubeconfig}")
        run(*kubectl, "create", "namespace", release.namespace)
        helm = (BIN / "helm", f"--kubeconfig={release.kubeconfig}", "-n", release.namespace)
        try:
            started = time.monotonic()
            run(*helm, "install", RELEASE, CHART, "-f", KIND_VALUES, "-f", BENCH_VALUES,
                "-f", path, "--wait", "--timeout", "10m", timeout=900)  # fmt: skip
            print(f"  helm install --wait took {time.monotonic() - started:.0f}s", flush=True)
            yield release
        finally:
            subprocess.run(
                [*map(str, helm), "uninstall", RELEASE, "--wait", "--timeout", "3m"],
                capture_output=True,
                check=False,
                timeout=300,
            )
            run(*kubectl, "delete", "namespace", release.namespace, "--timeout=180s", timeout=240)
            path.unlink(missing_ok=True)
