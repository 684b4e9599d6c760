"""PdfBatch tests on a real API server: kubectl helpers, and the operator as a process.

The control plane is the session's one (tests/support/kubefix.py, tools/kube.sh on free loopback
ports). Every kubectl call names its kubeconfig, checked to be that control plane's: an ambient
KUBECONFIG or another cluster is never touched. The operator runs as `pdfqueue operator` with
the token of its own ServiceAccount (k8s/rbac/operator.yaml plus the cluster-wide rules of
k8s/cluster-wide/operator-rbac.yaml, since each test watches namespaces of its own), never as
admin; `--standalone` unless a test asks for leader election, on the Lease its Role names.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import free_port, wait_until_async
from tests.support.kubefix import KubeCluster

ROOT = Path(__file__).parents[2]
CONTEXT = "pdfqueue-test"
T = TypeVar("T")


@dataclass
class Run:
    rc: int
    out: str
    err: str


@dataclass
class Cluster:
    kubeconfig: Path
    kubectl_bin: str
    system_ns: str = field(default_factory=lambda: f"pdfqueue-{uuid.uuid4().hex[:6]}")
    """Where this session's copy of k8s/rbac/*.yaml puts the ServiceAccounts (see own_copy)."""

    @property
    def dir(self) -> Path:
        return self.kubeconfig.parent

    def kubectl_sync(
        self, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> Run:
        done = subprocess.run(
            [self.kubectl_bin, f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Run(done.returncode, done.stdout, done.stderr)

    async def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = True,
    ) -> Run:
        proc = await asyncio.create_subprocess_exec(
            self.kubectl_bin,
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            *args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
        run = Run(proc.returncode or 0, out.decode(), err.decode())
        if check and run.rc != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {run.err}")
        return run

    async def apply(self, *docs: dict[str, Any], namespace: str, check: bool = True) -> Run:
        return await self.kubectl(
            "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(docs), check=check
        )

    async def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        run = await self.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
        if run.rc != 0:
            assert "NotFound" in run.err, run.err
            return None
        found: dict[str, Any] = json.loads(run.out)
        return found

    def token_kubeconfig(self, account: str, path: Path) -> Path:
        """A kubeconfig that authenticates as ServiceAccount `account` of this session."""
        token = self.kubectl_sync("create", "token", account, "-n", self.system_ns, "--duration=2h")
        assert token.rc == 0, token.err
        view = self.kubectl_sync("config", "view", "--raw", "-o", "json")
        cluster = json.loads(view.out)["clusters"][0]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": account, "user": {"token": token.out.strip()}}],
            "contexts": [
                {"name": CONTEXT, "context": {"cluster": cluster["name"], "user": account}}
            ],
            "current-context": CONTEXT,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path


@pytest.fixture(scope="session")
def kube(kube_cluster: KubeCluster) -> Cluster:
    """The session's control plane (kubefix), checked, with the CRD and RBAC manifests applied."""
    cluster = _checked(kube_cluster.kubeconfig, str(kube_cluster.bin / "kubectl"))
    for manifest in ("k8s/crds/pdfbatches.pdfqueue.io.yaml",):
        run = cluster.kubectl_sync("apply", "-f", str(ROOT / manifest))
        assert run.rc == 0, run.err
    run = cluster.kubectl_sync(
        "wait", "--for=condition=Established", "crd/pdfbatches.pdfqueue.io", "--timeout=30s"
    )
    assert run.rc == 0, run.err
    cluster.kubectl_sync("create", "namespace", cluster.system_ns)
    # The tests' operators serve namespaces each test creates: the cluster-wide mode's rights.
    for manifest in (
        "k8s/rbac/operator.yaml",
        "k8s/cluster-wide/operator-rbac.yaml",
        "k8s/rbac/api.yaml",
    ):
        docs = own_copy(ROOT / manifest, cluster.system_ns)
        run = cluster.kubectl_sync("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert run.rc == 0, run.err
    return cluster


def own_copy(manifest: Path, namespace: str) -> list[dict[str, Any]]:
    """The manifest's objects, moved to `namespace` and with cluster-wide names suffixed by it.

    Other tests of the session apply and delete the same files as they are (namespace
    pdfqueue, fixed ClusterRole names): this session's operator must not lose its rights then.
    """
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    for doc in docs:
        meta = doc["metadata"]
        if "namespace" in meta:
            meta["namespace"] = namespace
        if doc["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
            meta["name"] = f"{meta['name']}-{namespace}"
        if doc.get("roleRef", {}).get("kind") == "ClusterRole":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    return docs


def _checked(kubeconfig: Path, kubectl: str) -> Cluster:
    """Refuse any kubeconfig but one for a loopback control plane of tools/kube.sh."""
    cluster = Cluster(kubeconfig, kubectl)
    context = cluster.kubectl_sync("config", "current-context").out.strip()
    server = cluster.kubectl_sync("config", "view", "-o", "jsonpath={.clusters[0].cluster.server}")
    if context != CONTEXT or not server.out.startswith("https://127.0.0.1:"):
        pytest.fail(f"refusing kube context {context!r} at {server.out!r}: not the test cluster")
    return cluster


@pytest.fixture(scope="session")
def operator_kubeconfig(kube: Cluster) -> Path:
    return kube.token_kubeconfig("pdfqueue-operator", kube.dir / "operator.kubeconfig")


@pytest.fixture(scope="session")
def api_kubeconfig(kube: Cluster) -> Path:
    return kube.token_kubeconfig("pdfqueue-api", kube.dir / "api.kubeconfig")


@pytest.fixture
async def namespace(kube: Cluster) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.kubectl("create", "namespace", name)
    yield name
    await kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


@dataclass
class OperatorProcess:
    """`pdfqueue operator` serving one namespace, as its own ServiceAccount."""

    proc: asyncio.subprocess.Process
    log: Path
    health_port: int
    metrics_port: int
    env: dict[str, str] = field(repr=False)

    async def wait_ready(self, timeout_s: float = 60) -> None:
        async def healthy() -> bool | None:
            if self.proc.returncode is not None:
                raise AssertionError(f"operator exited:\n{self.tail()}")
            return await self.health() is not None or None

        await wait_until_async(healthy, "healthy", timeout_s)

    async def health(self) -> dict[str, Any] | None:
        """What /healthz says (role, identity, holder, loop ages), or None if it does not answer
        200."""
        async with httpx.AsyncClient() as http:
            try:
                r = await http.get(f"http://127.0.0.1:{self.health_port}/healthz", timeout=5)
            except httpx.TransportError:
                return None
        if r.status_code != 200:
            return None
        found: dict[str, Any] = r.json()
        return found

    async def identity(self) -> str:
        body = await self.health()
        assert body is not None, self.tail()
        return str(body["identity"])

    async def metric(self, name: str) -> float | None:
        """One unlabelled sample of this process's /metrics (None: not exported)."""
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"http://127.0.0.1:{self.metrics_port}/metrics")).text
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return None

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


StartOperator = Callable[..., Awaitable[OperatorProcess]]


@pytest.fixture
async def start_operator(
    kube: Cluster, operator_kubeconfig: Path, settings: Settings, tmp_path: Path
) -> AsyncIterator[StartOperator]:
    """Start the operator for one namespace with this test's queue and storage settings.

    `--standalone` (it acts at once) unless `elected`: then it campaigns for the Lease of
    k8s/rbac/operator.yaml in the session's system namespace, as a pod named `pod` would.
    """
    running: list[OperatorProcess] = []

    async def start(
        namespace: str, *, elected: bool = False, pod: str | None = None, **overrides: str
    ) -> OperatorProcess:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "PDFQUEUE_KUBE"))
        }
        health, metrics_port = free_port(), free_port()
        env |= {
            "KUBECONFIG": str(operator_kubeconfig),
            "PDFQUEUE_KUBECONFIG": str(operator_kubeconfig),
            "PDFQUEUE_QUEUE_NAME": settings.queue_name,
            "PDFQUEUE_STORAGE_URL": settings.storage_url,
            "PDFQUEUE_WORKER_MAX_JOBS": str(settings.max_jobs),
            "PDFQUEUE_OPERATOR_HEALTH_PORT": str(health),
            "PDFQUEUE_METRICS_PORT": str(metrics_port),
            "PDFQUEUE_OPERATOR_SCALE_INTERVAL_S": "0.25",
            "PDFQUEUE_OPERATOR_STATUS_INTERVAL_S": "0.25",
            # the example manifests' tenant (k8s/examples/pdfbatch.yaml)
            "PDFQUEUE_OPERATOR_NAMESPACE_TENANTS": f"{namespace}:hr",
            "PDFQUEUE_OPERATOR_LEASE_NAMESPACE": kube.system_ns,
            "HOSTNAME": pod or f"operator-{len(running)}",
            **overrides,
        }
        log = tmp_path / f"operator-{len(running)}.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "pdfqueue.cli.main",
                "operator",
                *(() if elected else ("--standalone",)),
                f"--namespace={namespace}",
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        process = OperatorProcess(proc, log, health, metrics_port, env)
        running.append(process)
        await process.wait_ready()
        return process

    yield start
    for process in running:
        await process.stop()
