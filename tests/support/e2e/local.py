"""LocalDriver: the chart installed on the local control plane, its processes run on this host.

`helm install` puts the chart (with k8s/kind-values.yaml, as the kind e2e does, pointed at the
local Redis, PostgreSQL and versitygw) into a namespace of the test control plane, where kwok
runs its pods as fakes. The real work is done by local processes started from what the chart
rendered: each one's arguments and environment are those of its container in the rendered
Deployment (ConfigMap and Secret references resolved, $(VAR) expanded), nothing else from the
test's environment. The operator logs in with its own ServiceAccount's token, so the chart's RBAC
is what it gets; and a small "kubelet" keeps as many local `pdfqueue worker` processes running
as the worker Deployment's spec.replicas says, so the operator's decisions decide the work.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import IO, Any

import yaml

from pdfqueue_dev.processes import free_port
from tests.support.chartfix import CHART, ROOT, Rendered
from tests.support.kubefix import KubeCluster

PDFQUEUE = Path(sys.executable).parent / "pdfqueue"
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")


class LocalDriver:
    """Implements tests.support.e2e.scenario.ClusterDriver with local processes."""

    def __init__(self, cluster: KubeCluster, services: dict[str, str], workdir: Path) -> None:
        self.cluster = cluster
        self.services = services
        self.workdir = workdir
        self.tag = uuid.uuid4().hex[:8]
        self.release = "e2e"
        self.namespace = ""
        self.token = f"e2e-{uuid.uuid4().hex}"  # the chart refuses plain tokens under 32 chars
        self.users_table = f"users_e2e_{self.tag}"
        self.api_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logs: dict[str, Path] = {}
        self._stop = threading.Event()
        self._kubelet: threading.Thread | None = None
        self.rendered: Rendered | None = None

    # ---- deploy ----------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """Point the chart at the local services; isolate this run (queue, table, prefix)."""
        return {
            "auth": {"apiTokens": {"e2e": self.token}},
            "config": {"queueName": f"pdfqueue-e2e:{self.tag}", "usersTable": self.users_table},
            "storage": {"bucket": "pdfqueue", "prefix": f"e2e-{self.tag}"},
            "redis": {"enabled": False},
            "externalRedis": {"url": self.services["PDFQUEUE_REDIS_URL"]},
            "postgresql": {"enabled": False},
            "externalDatabase": {"url": self.services["PDFQUEUE_DATABASE_URL"]},
            "s3": {"enabled": False},
            "externalS3": {
                "endpointUrl": self.services["PDFQUEUE_S3_ENDPOINT_URL"],
                "accessKeyId": os.environ.get("AWS_ACCESS_KEY_ID", "pdfqueue"),
                "secretAccessKey": os.environ.get("AWS_SECRET_ACCESS_KEY", "pdfqueue-secret"),
            },
            # several processes share this host: one port for the API, no metrics listeners
            "api": {"port": self.api_port},
            "worker": {"metricsPort": 0, "extractProcesses": 2},
            "operator": {"metricsPort": 0, "healthPort": free_port()},
        }

    def start(self) -> None:
        self.namespace = self.cluster.create_namespace("e2e-local")
        local_values = self.workdir / "local-values.yaml"
        local_values.write_text(yaml.safe_dump(self.values()))
        self.cluster.helm(
            "install",
            self.release,
            str(CHART),
            "-n",
            self.namespace,
            "-f",
            str(ROOT / "k8s/kind-values.yaml"),
            "-f",
            str(local_values),
            "--wait",
            "--timeout",
            "120s",
            timeout=180,
        )
        manifest = self.cluster.helm("get", "manifest", self.release, "-n", self.namespace)
        self.rendered = Rendered.parse(manifest.stdout)
        # the chart's migration Job first: migrations (and the bucket)
        self.run_container("migrate", "migrate")
        self.procs["api"] = self.start_container("api", "api", "api")
        kubeconfig = self.sa_kubeconfig()
        self.procs["operator"] = self.start_container(
            "operator",
            "operator",
            "operator",
            extra_env={"KUBECONFIG": str(kubeconfig), "PDFQUEUE_KUBECONFIG": str(kubeconfig)},
        )
        self._kubelet = threading.Thread(target=self._run_workers, name="kubelet", daemon=True)
        self._kubelet.start()

    def stop(self) -> None:
        self._stop.set()
        if self._kubelet:
            self._kubelet.join(timeout=60)
        for proc in [*self.workers, *self.procs.values()]:
            _terminate(proc, grace_s=30)
        if self.namespace:
            self.cluster.helm("uninstall", self.release, "-n", self.namespace, check=False)
            self.cluster.kubectl(
                "delete",
                "clusterrole,clusterrolebinding",
                f"{self.release}-pdfqueue-operator-{self.namespace}",
                "--ignore-not-found",
                check=False,
            )

    # ---- the chart's containers as local processes -----------------------------------------
    def workload(self, component: str) -> dict[str, Any]:
        """The component's Deployment; for `migrate`, the Job `helm install` runs."""
        assert self.rendered
        if component == "migrate":
            return self.rendered.one("Job", "-migrate-install")
        return self.rendered.one("Deployment", f"-{component}")

    def command(
        self, component: str, container: str, *, init: bool = False
    ) -> tuple[list[str], dict[str, str]]:
        assert self.rendered
        workload = self.workload(component)
        spec = workload["spec"]["template"]["spec"]
        c = next(
            x for x in spec["initContainers" if init else "containers"] if x["name"] == container
        )
        args = [a.replace("0.0.0.0", "127.0.0.1") for a in c.get("args", [])]
        env = self.rendered.container_env(workload, container, init=init, namespace=self.namespace)
        env.update({k: os.environ[k] for k in BASE_ENV if k in os.environ})
        for name, path in list(env.items()):  # a Secret mounted as a file: a local copy
            if name.endswith("_FILE") and not init:
                local = self.workdir / f"{container}-{Path(path).name}"
                local.write_text(self.rendered.mounted_secret(workload, container, path))
                local.chmod(0o600)
                env[name] = str(local)
        return [str(PDFQUEUE), *args], env

    def _log(self, name: str) -> IO[bytes]:
        path = self.workdir / f"{name}.log"
        self.logs[name] = path
        return path.open("ab")

    def run_container(self, component: str, container: str, *, init: bool = False) -> None:
        argv, env = self.command(component, container, init=init)
        with self._log(container) as log:
            proc = subprocess.run(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=120,
                check=False,
                cwd=self.workdir,
            )
        assert proc.returncode == 0, self.diagnostics()

    def start_container(
        self, component: str, container: str, name: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        argv, env = self.command(component, container)
        env.update(extra_env or {})
        with self._log(name) as log:
            return subprocess.Popen(
                argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
            )

    def sa_kubeconfig(self) -> Path:
        """A kubeconfig holding a token of the chart's operator ServiceAccount."""
        sa = self.workload("operator")["spec"]["template"]["spec"]["serviceAccountName"]
        token = self.cluster.kubectl(
            "create", "token", sa, "-n", self.namespace, "--duration", "2h"
        ).stdout.strip()
        admin = yaml.safe_load(self.cluster.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": "operator", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "operator",
                    "context": {
                        "cluster": cluster["name"],
                        "user": "operator",
                        "namespace": self.namespace,
                    },
                }
            ],
            "current-context": "operator",
        }
        path = self.workdir / "operator.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def _run_workers(self) -> None:
        """Keep len(workers) == the Deployment's spec.replicas, as a kubelet would."""
        grace = self.workload("worker")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        while not self._stop.is_set():
            self.workers = [w for w in self.workers if w.poll() is None]
            try:
                want = self.worker_replicas()
            except AssertionError:
                want = len(self.workers)
            while len(self.workers) < want:
                n = len(self.logs)
                self.workers.append(self.start_container("worker", "worker", f"worker-{n}"))
            while len(self.workers) > want:  # listed while it drains, as a terminating pod
                _terminate(self.workers[-1], grace_s=grace)
                self.workers.pop()
            self._stop.wait(0.5)

    # ---- ClusterDriver ---------------------------------------------------------------------
    def database_url(self) -> str:
        return self.command("api", "api")[1]["PDFQUEUE_DATABASE_URL"]

    def worker_replicas(self) -> int:
        out = self.cluster.kubectl(
            "get",
            "deployment",
            f"{self.release}-pdfqueue-worker",
            "-n",
            self.namespace,
            "-o",
            "jsonpath={.spec.replicas}",
        ).stdout
        return int(out or 0)

    def workers_alive(self) -> int:
        return sum(w.poll() is None for w in list(self.workers))

    def diagnostics(self) -> str:
        parts = []
        for name, path in sorted(self.logs.items()):
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- {name}.log (last 40 lines)\n" + "\n".join(text.splitlines()[-40:]))
        return "\n".join(parts)


def _terminate(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM, then SIGKILL after the grace period: what the kubelet does to a container."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
