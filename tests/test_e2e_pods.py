"""The e2e scenario on real pods: the chart on a kubelet with containerd and runc, here.

`tools/kube.sh up DIR --real-node` starts the control plane with one real node (CNI bridge,
kube-proxy, CoreDNS, hostPath PVs) and imports the images of `tools/images.sh` (built here from
Debian packages and the real Dockerfiles, cached by content hash). The chart is installed with
those images; every pod must become Ready by its own probes; the scenario of
tests/support/e2e/scenario.py runs through the API's Service (its ClusterIP, via kube-proxy); then the
release is exercised: worker and Redis pods deleted mid-batch, `helm upgrade`, `helm test`,
`helm uninstall`.

It runs by default (marker `pods`) where containers can run: root, cgroups, overlayfs,
br_netfilter; the Debian packages are installed when missing. Elsewhere it skips with the one
failing prerequisite. `--no-pods` or PDFQUEUE_PODS=0 turns it off; `--pods` or PDFQUEUE_PODS=1
requires it (a missing prerequisite fails instead of skipping). The node's state (etcd,
containerd's images) is kept in $PDFQUEUE_PODS_DIR (default .state/kube-real) so a warm run
imports nothing; it is stopped after the module.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from pdfqueue.domain.models import TERMINAL
from pdfqueue_dev.corpora.samples import Mix, build_corpus, write_zip
from pdfqueue_dev.processes import free_port, wait_until
from pdfqueue_dev.realnode import (
    CHART_IMAGES,
    CommandFailed,
    chart_image_values,
    image_refs,
    node_env,
    run,
)
from tests.support.chartfix import CHART, HELM, KUBECTL, ROOT
from tests.support.e2e.scenario import ClusterDriver, _seed, run_scenario
from tests.support.podsmode import pods_mode
from tests.support.tours import tour

# The first test also builds the images and the node binaries when the cache is cold.
pytestmark = [pytest.mark.pods, pytest.mark.timeout(3600)]

RELEASE = "pdfqueue"
NODE_DIR = Path(os.environ.get("PDFQUEUE_PODS_DIR", ROOT / ".state/kube-real"))
KUBE_SH = ROOT / "tools/kube.sh"
IMAGES_SH = ROOT / "tools/images.sh"
KIND_VALUES = ROOT / "k8s/kind-values.yaml"
TOKEN: str = yaml.safe_load(KIND_VALUES.read_text())["auth"]["apiTokens"]["e2e"]
NODE_CANNOT = 3  # tools/kube.sh node-check: this machine cannot run containers


def _node_env() -> dict[str, str]:
    return node_env(NODE_DIR)


def _cannot_run(reason: str, required: bool) -> None:
    """This machine cannot run containers: skip with the reason, or fail where pods are required."""
    if required:
        pytest.fail(f"real pods required (--pods or PDFQUEUE_PODS=1) but {reason}")
    pytest.skip(f"containers cannot run here: {reason}")


def _node_check(required: bool) -> str:
    """`tools/kube.sh node-check`: installs the Debian packages the node needs (iptables,
    containerd, ...) and reclaims what a dead node left; its stderr. Exit 3: this machine
    cannot run containers (skip, or fail where pods are required)."""
    check = subprocess.run(
        ["bash", str(KUBE_SH), "node-check", str(NODE_DIR)],
        capture_output=True,
        text=True,
        check=False,
        env=_node_env(),
        timeout=900,
    )
    reason = (check.stderr.strip().splitlines() or ["node-check failed"])[-1].removeprefix("kube: ")
    if check.returncode == NODE_CANNOT:
        _cannot_run(reason, required)
    assert check.returncode == 0, f"tools/kube.sh node-check failed:\n{check.stderr[-4000:]}"
    return check.stderr


@pytest.fixture(scope="module")
def real_node(request: pytest.FixtureRequest) -> Iterator[Path]:
    required = pods_mode(request.config) == "required"
    if os.geteuid() != 0:
        _cannot_run("not root (containerd, runc, network namespaces, iptables)", required)
    env = _node_env()
    _node_check(required)
    before = _host_network()
    try:
        run("bash", KUBE_SH, "up", NODE_DIR, "--real-node", timeout=3600, env=env)
        yield NODE_DIR / "admin.kubeconfig"
    finally:
        run("bash", KUBE_SH, "down", NODE_DIR, timeout=600, env=env)
    # the host as it was: no bridge, no chain of ours or of kube-proxy, the same sysctls
    assert _host_network() == before


def _host_network() -> dict[str, object]:
    """What the real node changes on the host and must give back on `down`."""
    chains = run("iptables-save").splitlines() + run("ip6tables-save").splitlines()
    sysctls = ("net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables")
    return {
        "bridge": (
            Path("/sys/class/net") / os.environ.get("PDFQUEUE_NODE_BRIDGE", "pdfq0")
        ).exists(),
        "chains": sorted({c.split()[0] for c in chains if c.startswith((":PDFQ", ":KUBE"))}),
        "sysctls": {s: (Path("/proc/sys") / s).read_text().strip() for s in sysctls},
    }


OWNER_FILE = Path("/run/pdfqueue-real-node.owner")


def test_a_node_that_died_leaves_nothing_for_the_next_one(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A node killed without `down` (its run cut off) leaves its mounts, its bridge and its
    chains; the next node-check removes them and says so, so that the next node starts on the
    host as it was. Runs before the module's node starts (and its host snapshot is taken)."""
    required = pods_mode(request.config) == "required"
    if os.geteuid() != 0:
        _cannot_run("not root (containerd, runc, network namespaces, iptables)", required)
    assert not OWNER_FILE.exists(), f"a real node runs here ({OWNER_FILE.read_text()})"
    _node_check(required)  # first: on a fresh machine it installs iptables, used below
    bridge = os.environ.get("PDFQUEUE_NODE_BRIDGE", "pdfq0")
    dead = tmp_path / "dead"
    volume = dead / "kubelet/root/pods/p/volumes/v"
    (dead / "run").mkdir(parents=True)
    volume.mkdir(parents=True)
    try:
        run("mount", "-t", "tmpfs", "tmpfs", volume)
        OWNER_FILE.write_text(f"{dead}\n")
        run("ip", "link", "add", bridge, "type", "bridge")
        run("iptables", "-N", "PDFQ-FWD")
        reclaimed = _node_check(required)
        assert f"no longer runs left mounts under {dead} bridge {bridge} chains PDFQ-*" in (
            reclaimed
        )
        host = _host_network()
        assert host["bridge"] is False
        assert isinstance(host["chains"], list)
        assert not [c for c in host["chains"] if c.startswith(":PDFQ")]
        assert str(volume) not in Path("/proc/self/mounts").read_text()
        assert not OWNER_FILE.exists()
    finally:
        subprocess.run(["umount", "-l", str(volume)], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
        subprocess.run(["iptables", "-X", "PDFQ-FWD"], capture_output=True, check=False)
        OWNER_FILE.unlink(missing_ok=True)


class PodsDriver(ClusterDriver):
    """tests/support/e2e/scenario.py's ClusterDriver for the release on the real node."""

    users_table = "users"
    token = TOKEN

    def __init__(self, kubeconfig: Path, namespace: str, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.workdir = workdir
        self.api_url = ""
        self.values: list[str] = []
        """helm's -f arguments: k8s/kind-values.yaml, then the local images."""

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        return run(
            KUBECTL, f"--kubeconfig={self.kubeconfig}", "-n", self.namespace, *args, timeout=timeout
        )

    def helm(self, *args: str, timeout: float = 900) -> str:
        return run(
            HELM, f"--kubeconfig={self.kubeconfig}", "-n", self.namespace, *args, timeout=timeout
        )

    def get(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json"))
        return out

    def service_url(self, component: str, port: int) -> str:
        ip = self.get("service", f"{RELEASE}-{component}")["spec"]["clusterIP"]
        return f"http://{ip}:{port}"

    def database_url(self) -> str:
        secret = self.get("secret", f"{RELEASE}-postgresql")["data"]
        password = base64.b64decode(secret["postgres-password"]).decode()
        # a headless Service: its one pod, on the node's bridge, which this host reaches
        ip = self.get("pod", f"{RELEASE}-postgresql-0")["status"]["podIP"]
        return f"postgresql://pdfqueue:{password}@{ip}:5432/pdfqueue"

    def worker_replicas(self) -> int:
        return int(self.get("deployment", f"{RELEASE}-worker")["spec"].get("replicas") or 0)

    def workers_alive(self) -> int:
        return len(self.pods("worker"))  # terminating ones are listed until they are gone

    def pods(self, component: str) -> list[dict[str, Any]]:
        sel = f"app.kubernetes.io/component={component}"
        items: list[dict[str, Any]] = self.get("pods", "-l", sel)["items"]
        return items

    def diagnostics(self) -> str:
        parts = []
        for args in (
            (
                "get",
                "nodes",
                "-o",
                "jsonpath={range .items[*].status.conditions[*]}"
                "{.type}={.status} {.message}{'\\n'}{end}",
            ),
            ("get", "pods,deployments,statefulsets,pvc,pdfbatches", "-o", "wide"),
            ("get", "events", "--sort-by=.lastTimestamp"),
            ("logs", f"deployment/{RELEASE}-operator", "--tail=60"),
            ("logs", f"deployment/{RELEASE}-api", "--tail=40"),
        ):
            try:
                parts.append(self.kubectl(*args))
            except CommandFailed as exc:
                parts.append(f"({' '.join(args)}: {exc})")
        return "\n".join(parts)[-12000:]


def _image_values(images_sh: Path = IMAGES_SH) -> dict[str, Any]:
    """The chart's image values for the images `images_sh` builds (from its own checkout)."""
    refs = image_refs(images_sh, run)
    if images_sh != IMAGES_SH:  # the node imported this checkout's images only
        sock = NODE_DIR / "containerd/containerd.sock"
        for name in CHART_IMAGES.values():
            archive = run("bash", images_sh, "archive", refs[name]).strip()
            run("ctr", "--address", sock, "-n", "k8s.io", "images", "import", archive)
    return chart_image_values(refs)


@pytest.fixture(scope="module")
def release(real_node: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodsDriver]:
    with _installed(real_node, tmp_path_factory.mktemp("pods"), CHART, IMAGES_SH) as driver:
        yield driver


PREVIOUS_RELEASE = "7d2240ed712d1f17e44eaa0d97f013e87fa8fcd2"
"""The commit of the release this chart upgrades from (its API pods migrated in an init
container, with the runner before schema versions): move it on with each release. Not `main`,
which is this very code once the change has landed."""


@pytest.fixture
def previous_release(
    real_node: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PodsDriver]:
    """The previous release (its chart and its images), in a namespace of its own."""
    workdir = tmp_path_factory.mktemp("previous")
    tree = workdir / "previous"
    run("git", "worktree", "add", "--detach", tree, PREVIOUS_RELEASE)
    try:
        chart = tree / "charts/pdfqueue"
        with _installed(real_node, workdir, chart, tree / "tools/images.sh") as driver:
            yield driver
    finally:
        run("git", "worktree", "remove", "--force", tree)


@contextlib.contextmanager
def _installed(
    real_node: Path, workdir: Path, chart: Path, images_sh: Path
) -> Iterator[PodsDriver]:
    """`helm install --wait` of `chart` with the images of `images_sh`'s checkout; uninstalled
    and its namespace deleted afterwards."""
    namespace = f"pdfq-pods-{uuid.uuid4().hex[:6]}"
    driver = PodsDriver(real_node, namespace, workdir)
    values = workdir / "images.yaml"
    values.write_text(yaml.safe_dump(_image_values(images_sh)))
    driver.values = [
        "-f",
        str(KIND_VALUES),
        "-f",
        str(values),
    ]
    run(KUBECTL, f"--kubeconfig={real_node}", "create", "namespace", namespace)
    try:
        started = time.monotonic()
        try:
            driver.helm(
                "install",
                RELEASE,
                str(chart),
                *driver.values,
                "--wait",
                "--timeout",
                "10m",
            )
        except CommandFailed as exc:  # say why the pods did not become Ready
            raise AssertionError(f"{exc}\n{driver.diagnostics()}") from None
        print(f"helm install --wait took {time.monotonic() - started:.0f}s")
        driver.api_url = driver.service_url("api", 80)
        yield driver
    finally:
        subprocess.run(
            [
                str(HELM),
                f"--kubeconfig={real_node}",
                "-n",
                namespace,
                "uninstall",
                RELEASE,
                "--wait",
                "--timeout",
                "3m",
            ],
            capture_output=True,
            check=False,
            timeout=300,
        )
        run(
            KUBECTL,
            f"--kubeconfig={real_node}",
            "delete",
            "namespace",
            namespace,
            "--wait=true",
            "--timeout=180s",
            timeout=240,
        )


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_every_pod_is_ready_by_its_probes_as_the_charts_users(release: PodsDriver) -> None:
    items = release.get("pods")["items"]
    # a worker may still run: the Deployment starts with one until the operator scales it to 0
    # (one already stopping, on its way out, is not a pod of the running release)
    pods = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    # the install's migration Job runs to completion (the API is ready as soon as the schema
    # is there; the Job may still be making sure of the bucket)
    job = f"job/{RELEASE}-migrate-install"
    release.kubectl("wait", "--for=condition=complete", job, "--timeout=300s", timeout=330)
    assert release.get(job)["status"].get("succeeded") == 1
    label = "app.kubernetes.io/component"
    pods = [p for p in pods if p["metadata"]["labels"][label] != "migrate"]
    by_component = {p["metadata"]["labels"][label]: p for p in pods}
    assert set(by_component) - {"worker"} == {"api", "operator", "redis", "postgresql", "s3"}
    for component, pod in by_component.items():
        assert _ready(pod), (component, pod["status"])
        statuses = pod["status"]["containerStatuses"]
        assert all(s["restartCount"] == 0 for s in statuses), (component, statuses)
    for component in ("api", "operator"):
        uid = release.kubectl(
            "exec",
            f"deployment/{RELEASE}-{component}",
            "--",
            "python",
            "-c",
            "import os; print(os.getuid(), os.getgid())",
        )
        assert uid.split() == ["10001", "10001"], (component, uid)
        # the root filesystem is read-only, the code (the venv) too
        probe = release.kubectl(
            "exec",
            f"deployment/{RELEASE}-{component}",
            "--",
            "python",
            "-c",
            "import os, sys\nfor p in ('/x', os.path.join(sys.prefix, 'x')):\n"
            "    try:\n        open(p, 'w')\n        print('writable')\n"
            "    except OSError:\n        print('read-only')",
        )
        assert probe.split() == ["read-only", "read-only"], probe


def test_the_scenario_through_the_api_service(release: PodsDriver) -> None:
    seen = run_scenario(release, release.workdir, files=120, settle_s=300, batch_s=600)
    # the Deployment starts with one worker until the operator's first scale-down; from the
    # idle zero on: up for the batch, then back to zero
    counts = [n for _, n in seen.replicas]
    idle = counts.index(0)
    assert max(counts[idle:]) >= 1, counts
    assert counts[-1] == 0, counts


def _client(release: PodsDriver) -> httpx.Client:
    return httpx.Client(
        base_url=release.api_url, timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}
    )


def _upload(
    release: PodsDriver, client: httpx.Client, files: int, seed: int
) -> tuple[str, dict[str, int]]:
    corpus = build_corpus(files, seed=seed)
    asyncio.run(_seed(release.database_url(), corpus.users, release.users_table))
    archive = write_zip(corpus, release.workdir / f"batch-{seed}.zip", seed=seed)
    _wait_ready(client)
    created = client.post(
        "/v1/batches", content=archive.read_bytes(), headers={"Content-Type": "application/zip"}
    )
    assert created.status_code == 202, created.text
    return created.json()["batch_id"], corpus.counts()


def _wait_ready(client: httpx.Client, timeout_s: float = 120) -> None:
    """Until the API Service answers `/readyz` with 200: after the test before this one
    deleted a pod, its endpoints may be gone for a moment (a user would wait, too)."""

    def ready() -> bool | None:
        try:
            return client.get("/readyz").status_code == httpx.codes.OK or None
        except httpx.TransportError:
            return None

    wait_until(ready, "the API Service to be ready", timeout_s)


def _finish(
    release: PodsDriver, client: httpx.Client, batch_id: str, expected: dict[str, int], files: int
) -> None:
    def finished() -> dict[str, Any] | None:
        # while Redis or the API restarts, the API may answer 503 or not at all: ask again
        try:
            response = client.get(f"/v1/batches/{batch_id}")
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        status: dict[str, Any] = response.json()
        return status if status["status"] in TERMINAL else None

    final = wait_until(
        finished, f"batch {batch_id} finished", 600, interval_s=1.0, diagnostics=release.diagnostics
    )
    assert final["status"] == "COMPLETED", (final, release.diagnostics())
    assert {k: final[k] for k in expected} == expected, (final, expected)
    assert final["processed"] == final["total_files"] == files


def _wait_running_workers(release: PodsDriver) -> list[dict[str, Any]]:
    def running() -> list[dict[str, Any]] | None:
        pods = [p for p in release.pods("worker") if _ready(p)]
        return pods or None

    found: list[dict[str, Any]] = wait_until(
        running, "a Ready worker pod", 300, interval_s=0.5, diagnostics=release.diagnostics
    )
    return found


def test_a_worker_pod_deleted_mid_batch_drains_and_nothing_is_lost(release: PodsDriver) -> None:
    files = 300
    with _client(release) as client:
        batch_id, expected = _upload(release, client, files, seed=11)
        victim = _wait_running_workers(release)[0]
        name = victim["metadata"]["name"]
        grace = victim["spec"]["terminationGracePeriodSeconds"]
        started = time.monotonic()
        release.kubectl(
            "delete", "pod", name, "--wait=true", f"--timeout={grace + 60}s", timeout=grace + 90
        )
        took = time.monotonic() - started
        _finish(release, client, batch_id, expected, files)
    # it was gone within its grace period (plus the kubelet's bookkeeping), not killed after it
    assert took < grace + 15, (took, grace)
    logs = release.kubectl(
        "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
    )
    reasons = {e["reason"] for e in json.loads(logs)["items"]}
    assert "Killing" in reasons, reasons


def test_the_redis_pod_deleted_mid_batch_comes_back_from_its_aof(release: PodsDriver) -> None:
    files = 200
    with _client(release) as client:
        batch_id, expected = _upload(release, client, files, seed=13)
        _wait_running_workers(release)
        before = release.pods("redis")[0]
        release.kubectl("delete", "pod", before["metadata"]["name"], "--wait=true", timeout=180)

        def back() -> dict[str, Any] | None:
            pods = release.pods("redis")
            fresh = [p for p in pods if p["metadata"]["uid"] != before["metadata"]["uid"]]
            return fresh[0] if fresh and _ready(fresh[0]) else None

        after = wait_until(
            back, "the Redis pod Ready again", 300, interval_s=0.5, diagnostics=release.diagnostics
        )
        # the same claim: the StatefulSet's PVC, not a fresh volume
        claim = [
            v["persistentVolumeClaim"]["claimName"]
            for v in after["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claim == [f"data-{RELEASE}-redis-0"], after["spec"]["volumes"]
        _finish(release, client, batch_id, expected, files)


def test_helm_upgrade_rolls_every_pod_mid_batch_and_loses_no_file(release: PodsDriver) -> None:
    files = 200
    with _client(release) as client:
        batch_id, expected = _upload(release, client, files, seed=17)
        _wait_running_workers(release)
        old = {p["metadata"]["uid"] for c in ("api", "operator") for p in release.pods(c)}
        # a config value: the ConfigMap's checksum rolls the API, operator and worker pods
        release.helm(
            "upgrade",
            RELEASE,
            str(CHART),
            *release.values,
            "--set",
            "config.metricsIntervalSeconds=4",
            "--wait",
            "--timeout",
            "10m",
        )
        _finish(release, client, batch_id, expected, files)
    # the replaced pods may still be terminating when helm's --wait is satisfied
    new = [
        p
        for c in ("api", "operator")
        for p in release.pods(c)
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert all(_ready(p) for p in new), [p["status"] for p in new]
    assert not old & {p["metadata"]["uid"] for p in new}, "every API and operator pod replaced"
    config = release.get("configmap", f"{RELEASE}-config")["data"]
    assert config["PDFQUEUE_METRICS_INTERVAL_S"] == "4", config
    # the pre-upgrade hook's Job is deleted once it succeeded, the install's with the old release
    jobs = [j for j in release.get("jobs")["items"] if not j["metadata"].get("deletionTimestamp")]
    assert not jobs, [j["metadata"]["name"] for j in jobs]


def test_helm_upgrade_from_the_previous_release_migrates_in_its_hook_mid_batch(
    previous_release: PodsDriver,
) -> None:
    """From the chart of PREVIOUS_RELEASE (its API pods migrated in an init container) to this
    one with a batch in flight: the pre-upgrade hook Job migrates (only this release's runner
    grows pdfqueue_migrations by its version columns), the rollout completes, the batch too."""
    release = previous_release
    files = 200
    previous_images = release.values[-1]
    with _client(release) as client:
        batch_id, expected = _upload(release, client, files, seed=23)
        _wait_running_workers(release)
        images = release.workdir / "current-images.yaml"
        images.write_text(yaml.safe_dump(_image_values()))
        release.values = [*release.values[:-1], str(images)]
        # the previous release's code first, then this one's
        before, after = (yaml.safe_load(Path(f).read_text()) for f in (previous_images, images))
        assert before["api"]["image"]["tag"] != after["api"]["image"]["tag"]
        release.helm("upgrade", RELEASE, str(CHART), *release.values, "--wait", "--timeout", "10m")
        _finish(release, client, batch_id, expected, files)
    events = release.get("events", "--field-selector", f"involvedObject.name={RELEASE}-migrate")
    reasons = {e["reason"] for e in events["items"] if e["involvedObject"]["kind"] == "Job"}
    assert "Completed" in reasons, reasons  # the hook's Job ran to the end (then was deleted)
    assert not release.get("jobs")["items"]
    columns = asyncio.run(_migration_columns(release.database_url()))
    assert {"number", "min_compatible"} <= columns, columns
    for component in ("api", "worker", "operator"):
        for pod in release.pods(component):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            assert "initContainers" not in pod["spec"], pod["metadata"]["name"]
            tag = pod["spec"]["containers"][0]["image"].rsplit(":", 1)[1]
            assert tag in images.read_text(), (pod["metadata"]["name"], tag)


async def _migration_columns(dsn: str) -> set[str]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'pdfqueue_migrations'"
        )
    finally:
        await conn.close()
    return {r["column_name"] for r in rows}


def test_helm_test_passes(release: PodsDriver) -> None:
    out = release.helm("test", RELEASE, "--timeout", "5m")
    assert "Phase:          Succeeded" in out or "Succeeded" in out, out


def test_helm_uninstall_leaves_only_the_pvcs(release: PodsDriver) -> None:
    release.helm("uninstall", RELEASE, "--wait", "--timeout", "5m")
    # the pods go after their owners, through the garbage collector
    release.kubectl("wait", "--for=delete", "pods", "--all", "--timeout=180s", timeout=200)
    left = release.get("all,configmaps,secrets,serviceaccounts,roles,rolebindings,pvc")["items"]
    kinds = sorted(
        {
            (o["kind"], o["metadata"]["name"])
            for o in left
            if o["metadata"]["name"] not in ("kube-root-ca.crt", "default")
        }
    )
    assert kinds == [
        ("PersistentVolumeClaim", f"data-{RELEASE}-postgresql-0"),
        ("PersistentVolumeClaim", f"data-{RELEASE}-redis-0"),
        ("PersistentVolumeClaim", f"data-{RELEASE}-s3-0"),
    ], kinds


TOUR_NAMESPACE = "pdfqueue"  # the README's, as written
TOUR_MIX = Mix(
    known=0.7, no_email=0.15, unknown_email=0.15, already_linked=0, corrupt=0, encrypted=0
)
"""A reader's ZIP: people in emails.txt and some who are not; none broken (the upload's
--wait exits 3 when a file failed, which would end the tour's shell)."""


@dataclass
class Tour:
    """A reader's folder (the chart's `charts/` and `k8s/`, their `resumes.zip` and
    `emails.txt`) and shell (kubectl, helm and uv on PATH, KUBECONFIG the node's)."""

    kubeconfig: Path
    workdir: Path
    env: dict[str, str]

    def kubectl(self, *args: str) -> str:
        return run(KUBECTL, f"--kubeconfig={self.kubeconfig}", "-n", TOUR_NAMESPACE, *args)

    def shell(self, block: str, name: str) -> str:
        """Run `block` in bash -eu, in a session of its own whose processes (a port-forward
        left in the background) are stopped afterwards, with this host's ports 8000 and 7070
        replaced by free ones; its stdout. Output goes to files: a process left in the
        background keeps a pipe open after the shell ends."""
        for port in ("8000", "7070"):
            free = str(free_port())
            block = re.sub(rf"(port-forward \S+ ){port}:", rf"\g<1>{free}:", block)
            block = block.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
        script = self.workdir / f"{name}.sh"
        script.write_text(f"set -euo pipefail\n{block}")
        out, err = (self.workdir / f"{name}.{kind}" for kind in ("out", "err"))
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                ["bash", str(script)],
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=1500)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        printed = out.read_text()
        assert code == 0, f"{script} exited {code}:\n{printed[-4000:]}\n{err.read_text()[-4000:]}"
        return printed

    def batches(self, phase: str) -> list[dict[str, Any]]:
        """The namespace's PdfBatch objects once every one shows `phase` (the operator
        copies progress into .status every couple of seconds)."""

        def settled() -> list[dict[str, Any]] | None:
            items: list[dict[str, Any]] = json.loads(
                self.kubectl("get", "pdfbatches", "-o", "json")
            )["items"]
            done = items and all(i.get("status", {}).get("phase") == phase for i in items)
            return items if done else None

        found: list[dict[str, Any]] = wait_until(settled, f"every PdfBatch {phase}", 300)
        return found

    def cleanup(self) -> None:
        """The tour's release and namespace gone (also what an interrupted run left)."""
        subprocess.run(
            [
                str(HELM),
                f"--kubeconfig={self.kubeconfig}",
                "-n",
                TOUR_NAMESPACE,
                "uninstall",
                "pdfqueue",
                "--wait",
            ],
            capture_output=True,
            check=False,
            timeout=300,
        )
        run(
            KUBECTL,
            f"--kubeconfig={self.kubeconfig}",
            "delete",
            "namespace",
            TOUR_NAMESPACE,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=180s",
            timeout=240,
        )
        # The node's volumes that deleted claims released (Retain), of this namespace and of
        # the releases before it, fresh again: eight, and each release claims three.
        run("bash", KUBE_SH, "pvs", NODE_DIR, timeout=120, env=_node_env())


@pytest.fixture
def reader(real_node: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tour]:
    workdir = tmp_path_factory.mktemp("tour")
    for folder in ("charts", "k8s"):
        (workdir / folder).symlink_to(ROOT / folder)
    uv = Path(shutil.which("uv") or os.environ["UV"])
    path = os.pathsep.join([str(HELM.parent), str(uv.parent), os.environ["PATH"]])
    tour = Tour(real_node, workdir, {**os.environ, "KUBECONFIG": str(real_node), "PATH": path})
    tour.cleanup()
    try:
        yield tour
    finally:
        tour.cleanup()


def test_the_readme_kubernetes_tour_runs_as_written(reader: Tour) -> None:
    """README's `<!-- tour: kubernetes -->` block, as a reader types it in a shell on this
    host, then what NOTES.txt prints for the token and the users, then install.md's
    `kubernetes-object` block (the ZIP into the bundled bucket with curl, a PdfBatch applied).
    The only substitutions: `helm install` also gets the images built here (the node pulls
    nothing) and a longer --timeout (a loaded machine), and the ports are free ones."""
    corpus = build_corpus(40, seed=31, mix=TOUR_MIX)
    write_zip(corpus, reader.workdir / "resumes.zip", seed=31)
    (reader.workdir / "emails.txt").write_text("".join(f"{u.email}\n" for u in corpus.users))
    (reader.workdir / "images.yaml").write_text(yaml.safe_dump(_image_values()))
    expected = corpus.counts()

    block = tour("kubernetes")
    install = "helm install pdfqueue charts/pdfqueue"
    assert block.count(install) == 1, block
    out = reader.shell(block.replace(install, f"{install} -f images.yaml --timeout 10m"), "readme")
    # the upload's --wait ended COMPLETED with no failed file (exit 0); the API's PdfBatch
    # is listed with the CRD's columns, and shows the batch's counts once the operator copied them
    header = r"^NAME\s+PHASE\s+FILES\s+PROCESSED\s+LINKED\s+FAILED\s+AGE$"
    assert re.search(header, out, re.M), out
    (batch,) = reader.batches("COMPLETED")
    status = batch["status"]
    assert status["totalFiles"] == status["processed"] == len(corpus.files), status
    assert status["linked"] == expected["linked"] > 0, (status, expected)
    assert status["skippedNoMatch"] == expected["skipped_no_match"] > 0, (status, expected)
    assert status["failed"] == 0, status
    row = reader.kubectl("get", "pdfbatch", batch["metadata"]["name"], "--no-headers").split()
    columns = [str(status[k]) for k in ("totalFiles", "processed", "linked", "failed")]
    assert row[1:6] == ["COMPLETED", *columns], row

    # NOTES.txt: the token, read from the Secret, is the tenant's; the users show their PDFs
    notes = run(
        HELM, f"--kubeconfig={reader.kubeconfig}", "-n", TOUR_NAMESPACE, "get", "notes", "pdfqueue"
    )
    token_line = _notes_line(notes, "export PDFQUEUE_TOKEN=")
    token = reader.shell(f'{token_line}\necho "$PDFQUEUE_TOKEN"\n', "token").strip()
    ip = json.loads(reader.kubectl("get", "service", "pdfqueue-api", "-o", "json"))["spec"]
    listed = httpx.get(
        f"http://{ip['clusterIP']}:80/v1/batches",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert listed.status_code == 200, listed.text
    assert [b["batch_id"] for b in listed.json()["batches"]] == [status["batchId"]]
    users = reader.shell(_notes_line(notes, "SELECT id, email, pdf_url FROM users"), "users")
    assert len([line for line in users.splitlines() if "pdfs/" in line]) == expected["linked"]

    # a batch as an object: the ZIP into the bundled bucket with curl, then kubectl apply;
    # the same people, whom the first batch linked already
    reader.shell(tour("kubernetes-object", ROOT / "docs/operations/install.md"), "object")
    applied = {b["metadata"]["name"]: b["status"] for b in reader.batches("COMPLETED")}
    assert applied["resumes-2024-06"]["skippedAlreadyExists"] == expected["linked"], applied
    assert applied["resumes-2024-06"]["linked"] == 0, applied


def _notes_line(notes: str, needle: str) -> str:
    """The one command line of NOTES.txt holding `needle`."""
    (line,) = [line.strip() for line in notes.splitlines() if needle in line]
    return line
