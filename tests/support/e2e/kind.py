"""KindDriver: a throwaway kind cluster, pdfqueue deployed by `skaffold run -p kind`.

Safety: the cluster is created by this driver under a random name (pdfqueue-e2e-<hex>), its
kubeconfig is written to the test's own temp file (the user's ~/.kube/config and current context
are never read or changed), every kubectl/skaffold call names that kubeconfig and context
explicitly, and only a cluster this driver created is ever deleted.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import IO, Any

from pdfqueue_dev.processes import free_port
from pdfqueue_dev.realnode import run
from tests.support.chartfix import ROOT

NAMESPACE = "pdfqueue"  # skaffold.yaml's release namespace
RELEASE = "pdfqueue"  # ... and release name: objects are named pdfqueue-<component>
TOOLS = ("kind", "skaffold", "kubectl", "docker")


class KindDriver:
    """Implements tests.support.e2e.scenario.ClusterDriver on a kind cluster it owns."""

    users_table = "users"  # the chart's default (k8s/kind-values.yaml keeps it)
    token = "e2e-token-0123456789abcdef0123456789abcdef"  # k8s/kind-values.yaml: auth.apiTokens.e2e

    def __init__(self, workdir: Path) -> None:
        missing = [t for t in TOOLS if not shutil.which(t)]
        if missing:
            raise RuntimeError(f"the kind e2e needs {', '.join(missing)} on PATH")
        self.workdir = workdir
        self.name = f"pdfqueue-e2e-{uuid.uuid4().hex[:8]}"
        self.context = f"kind-{self.name}"
        self.kubeconfig = workdir / "kind.kubeconfig"
        self.created = False
        self.forwards: list[subprocess.Popen[bytes]] = []
        self.api_url = ""
        self._db_url = ""

    # ---- safety --------------------------------------------------------------------------
    def _guard(self) -> None:
        """Refuse to touch any cluster but the one this driver created."""
        if not self.created or not self.name.startswith("pdfqueue-e2e-"):
            raise RuntimeError(f"refusing to act on {self.context!r}: not created by this test")
        current = self._run(
            "kubectl", "config", "current-context", "--kubeconfig", str(self.kubeconfig)
        ).strip()
        if current != self.context:
            raise RuntimeError(
                f"refusing kube context {current!r}: this test created {self.context!r} only"
            )

    def _env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def _run(self, *argv: str, timeout: float = 600) -> str:
        return run(*argv, timeout=timeout, env=self._env())

    def kubectl(self, *args: str) -> str:
        self._guard()
        return self._run(
            "kubectl", "--kubeconfig", str(self.kubeconfig), "--context", self.context, *args
        )

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._run(
            "kind",
            "create",
            "cluster",
            "--name",
            self.name,
            "--config",
            str(ROOT / "k8s/kind-cluster.yaml"),
            "--kubeconfig",
            str(self.kubeconfig),
            "--wait",
            "180s",
        )
        self.created = True
        self._guard()  # the kubeconfig kind wrote names our cluster and nothing else
        # Builds the three images, loads them into this kind cluster (push: false), and
        # installs the chart with k8s/kind-values.yaml; --status-check waits for rollouts.
        self._run(
            "skaffold",
            "run",
            "-p",
            "kind",
            "--kube-context",
            self.context,
            "--kubeconfig",
            str(self.kubeconfig),
            "--status-check=true",
            "--filename",
            str(ROOT / "skaffold.yaml"),
            timeout=1800,
        )
        api_port = self._forward(f"svc/{RELEASE}-api", 80)
        self.api_url = f"http://127.0.0.1:{api_port}"
        db_port = self._forward(f"svc/{RELEASE}-postgresql", 5432)
        secret = self.kubectl(
            "get",
            "secret",
            f"{RELEASE}-postgresql",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.data.postgres-password}",
        )
        password = base64.b64decode(secret).decode()
        self._db_url = f"postgresql://pdfqueue:{password}@127.0.0.1:{db_port}/pdfqueue"

    def stop(self) -> None:
        for proc in self.forwards:
            proc.terminate()
            proc.wait(timeout=10)
        if self.created:
            self._guard()
            self._run(
                "kind",
                "delete",
                "cluster",
                "--name",
                self.name,
                "--kubeconfig",
                str(self.kubeconfig),
            )
            self.created = False

    def _forward(self, target: str, port: int) -> int:
        """kubectl port-forward on a free local port; waits until it accepts connections."""
        self._guard()
        local = free_port()
        log: IO[bytes] = (self.workdir / f"forward-{local}.log").open("wb")
        proc = subprocess.Popen(
            [
                "kubectl",
                "--kubeconfig",
                str(self.kubeconfig),
                "--context",
                self.context,
                "-n",
                NAMESPACE,
                "port-forward",
                target,
                f"{local}:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
        )
        self.forwards.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", local), timeout=1).close()
                return local
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
        raise AssertionError(f"port-forward {target} did not come up")

    # ---- ClusterDriver -------------------------------------------------------------------
    def database_url(self) -> str:
        return self._db_url

    def worker_replicas(self) -> int:
        out = self.kubectl(
            "get",
            "deployment",
            f"{RELEASE}-worker",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.spec.replicas}",
        )
        return int(out or 0)

    def workers_alive(self) -> int:
        out = self.kubectl(
            "get",
            "pods",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/component=worker",
            "-o",
            "name",
        )
        return len(out.split())

    def diagnostics(self) -> str:
        parts: list[Any] = []
        for args in (
            ("get", "pods,deployments,pdfbatches", "-n", NAMESPACE, "-o", "wide"),
            ("logs", f"deployment/{RELEASE}-operator", "-n", NAMESPACE, "--tail=60"),
            ("logs", f"deployment/{RELEASE}-api", "-n", NAMESPACE, "--tail=40"),
        ):
            try:
                parts.append(self.kubectl(*args))
            except (AssertionError, RuntimeError) as exc:
                parts.append(f"({' '.join(args)}: {exc})")
        return "\n".join(parts)
