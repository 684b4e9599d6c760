"""A real Kubernetes control plane for the whole test session (tools/kube.sh), as a pytest plugin.

Loaded from conftest.py (`pytest_plugins`), so every test module shares one control plane:
etcd, kube-apiserver with RBAC, controller-manager, scheduler and kwok faking two nodes, on
free loopback ports, with its state in a session temp dir. Pods scheduled there become Running
without any image being pulled. Tests that use it are marked `kube`.

Set PDFQUEUE_KUBE_REUSE=DIR to use a control plane already started with `tools/kube.sh up DIR`
(it is then left running).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdfqueue_dev.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools")) / "bin"


@dataclass
class KubeCluster:
    """Handles to the control plane: kubeconfig, the cached kubectl/helm, and small helpers."""

    state: Path
    kubeconfig: Path
    bin: Path = TOOLS
    namespaces: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment a kubectl, helm or Kubernetes client process needs."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin}:{os.environ.get('PATH', '')}",
        }

    def run(
        self,
        tool: str,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.bin / tool), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}\n{proc.stdout[-2000:]}"
            )
        return proc

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, **kw)

    def get(self, *args: str) -> Any:
        """`kubectl get ... -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def create_namespace(self, prefix: str) -> str:
        """A fresh namespace, deleted at the end of the session."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", name)
        self.namespaces.append(name)
        return name

    def add_volumes(self, count: int, storage_class: str, size: str = "50Gi") -> list[str]:
        """Pre-provisioned PVs, as a cluster without a provisioner offers them; only claims of
        `storage_class` (no StorageClass object needed) can bind them."""
        names = [f"pv-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        docs = [
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": n, "labels": {"pdfqueue.io/test": "true"}},
                "spec": {
                    "storageClassName": storage_class,
                    "capacity": {"storage": size},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/{n}"},  # never touched: kwok runs no pods
                },
            }
            for n in names
        ]
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        return names


def _up(state: Path) -> None:
    env = {
        **os.environ,
        "PDFQUEUE_KUBE_PORT": str(free_port()),
        "PDFQUEUE_ETCD_PORT": str(free_port()),
        "PDFQUEUE_ETCD_PEER_PORT": str(free_port()),
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "tools/kube.sh"), "up", str(state)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        subprocess.run(
            ["bash", str(ROOT / "tools/kube.sh"), "down", str(state)],
            check=False,
            capture_output=True,
            timeout=120,
        )
        raise RuntimeError(f"tools/kube.sh up failed:\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """The session's control plane (started on first use, stopped at the end)."""
    reuse = os.environ.get("PDFQUEUE_KUBE_REUSE")
    if reuse:
        cluster = KubeCluster(state=Path(reuse), kubeconfig=Path(reuse) / "admin.kubeconfig")
        yield cluster
        for ns in cluster.namespaces:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        return
    state = tmp_path_factory.mktemp("kube")
    _up(state)
    cluster = KubeCluster(state=state, kubeconfig=state / "admin.kubeconfig")
    try:
        yield cluster
    finally:
        subprocess.run(
            ["bash", str(ROOT / "tools/kube.sh"), "down", str(state)],
            capture_output=True,
            timeout=180,
            check=False,
        )
