"""The Helm chart on a real API server (marked `kube`: the session's control plane of
tests/support/kubefix.py): rendered manifests validated by the server (`--dry-run=server`),
applied for real, and `helm install` scheduling every Deployment's and StatefulSet's pods
onto kwok's nodes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chartfix import (
    CHART,
    ROOT,
    VARIANTS,
    WORKLOADS,
    Rendered,
    template,
    values_file,
)
from tests.support.kubefix import KubeCluster

pytestmark = pytest.mark.skipif(not (CHART / "Chart.yaml").exists(), reason="no chart")


MONITORING_CRDS = """
# Stand-ins for the Prometheus operator's CRDs (their group, kinds and scope; any spec accepted):
# the real ones are not available offline. They let the API server store the objects; the
# objects' content is checked above (rendered from files, promtool).
"""


def _stub_crd(plural: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": kind.lower(),
                "kind": kind,
                "listKind": f"{kind}List",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def cluster(kube_cluster: KubeCluster) -> KubeCluster:
    """The control plane with the PdfBatch CRD and stand-ins for the monitoring CRDs."""
    docs = [
        _stub_crd("servicemonitors", "ServiceMonitor"),
        _stub_crd("prometheusrules", "PrometheusRule"),
    ]
    kube_cluster.kubectl("apply", "-f", "-", stdin=MONITORING_CRDS + yaml.safe_dump_all(docs))
    kube_cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(ROOT / "k8s/crds/pdfbatches.pdfqueue.io.yaml"),
    )
    for crd in (
        "servicemonitors.monitoring.coreos.com",
        "prometheusrules.monitoring.coreos.com",
        "pdfbatches.pdfqueue.io",
    ):
        kube_cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return kube_cluster


@pytest.mark.kube
@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", VARIANTS)
def test_rendered_variant_is_accepted_and_applied(cluster: KubeCluster, variant: str) -> None:
    ns = cluster.create_namespace(f"tpl-{variant}")
    manifest = template(
        "-f", str(values_file(variant)), "--skip-tests", namespace=ns, release=f"r{ns[-6:]}"
    )
    objects = Rendered.parse(manifest).all()
    dry = cluster.kubectl("apply", "-n", ns, "--dry-run=server", "-f", "-", stdin=manifest)
    assert dry.stdout.count("(server dry run)") == len(objects), dry.stdout
    real = cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=manifest)
    assert real.stdout.count(" created") == len(objects), real.stdout
    for obj in objects:  # every object is there, as the server stored it
        scope = [] if obj["kind"] in ("ClusterRole", "ClusterRoleBinding") else ["-n", ns]
        stored = cluster.get(obj["kind"], obj["metadata"]["name"], *scope)
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
    for obj in objects:  # cluster-scoped leftovers go with the namespace's test
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"])
    cluster.kubectl("delete", "namespace", ns, "--wait=false")


def _pods_of(cluster: KubeCluster, ns: str, workload: dict[str, Any]) -> list[dict[str, Any]]:
    sel = ",".join(f"{k}={v}" for k, v in workload["spec"]["selector"]["matchLabels"].items())
    items: list[dict[str, Any]] = cluster.get("pods", "-n", ns, "-l", sel)["items"]
    return items


@pytest.mark.kube
@pytest.mark.timeout(400)
def test_helm_install_schedules_every_pod(cluster: KubeCluster) -> None:
    ns = cluster.create_namespace("install")
    release = "pq"
    # The bundled Redis, PostgreSQL and versitygw claim one volume each, of this test's class.
    cluster.add_volumes(3, storage_class=ns)
    classes = [f"--set={c}.persistence.storageClass={ns}" for c in ("redis", "postgresql", "s3")]
    cluster.helm(
        "install",
        release,
        str(CHART),
        "-n",
        ns,
        "-f",
        str(values_file("default")),
        *classes,
        "--wait",
        "--timeout",
        "150s",
        timeout=200,
    )
    status = cluster.helm("status", release, "-n", ns, "-o", "json").stdout
    assert '"status":"deployed"' in status.replace(" ", "")

    rendered = Rendered.parse(cluster.helm("get", "manifest", release, "-n", ns).stdout)
    workloads = rendered.all("Deployment") + rendered.all("StatefulSet")
    assert {w["metadata"]["labels"]["app.kubernetes.io/component"] for w in workloads} == {
        "api",
        "worker",
        "operator",
        "redis",
        "postgresql",
        "s3",
    }
    nodes = {n["metadata"]["name"] for n in cluster.get("nodes")["items"]}
    for w in workloads:
        live = cluster.get(w["kind"].lower(), w["metadata"]["name"], "-n", ns)
        want = live["spec"]["replicas"]
        assert want >= 1, w["metadata"]["name"]  # the worker starts at the Deployment default
        assert live["status"].get("readyReplicas") == want, w["metadata"]["name"]
        pods = _pods_of(cluster, ns, w)
        assert len(pods) == want
        for pod in pods:
            assert pod["spec"]["nodeName"] in nodes
            assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
    claims = cluster.get("pvc", "-n", ns)["items"]
    assert sorted(c["status"]["phase"] for c in claims) == ["Bound"] * 3
    assert cluster.get("crd", "pdfbatches.pdfqueue.io")["spec"]["group"] == "pdfqueue.io"

    # `helm test`: kwok fakes the pod (curl never runs), so the hook cannot succeed here;
    # what can be proven is that helm creates the hook pod and the scheduler places it.
    cluster.helm("test", release, "-n", ns, "--timeout", "5s", check=False, timeout=60)
    hook = cluster.get("pod", f"{release}-pdfqueue-test-readyz", "-n", ns)
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert hook["spec"]["nodeName"] in nodes

    cluster.helm("uninstall", release, "-n", ns, "--wait", timeout=180)
    assert cluster.get("deployments", "-n", ns)["items"] == []


@pytest.mark.kube
def test_operator_service_account_gets_exactly_its_rights(cluster: KubeCluster) -> None:
    ns = cluster.create_namespace("rbac")
    manifest = template(
        "-f", str(values_file("default")), "--skip-tests", namespace=ns, release="rb"
    )
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=manifest)
    sa = f"system:serviceaccount:{ns}:rb-pdfqueue-operator"

    def can(verb: str, resource: str, *extra: str) -> bool:
        proc = cluster.kubectl("auth", "can-i", verb, resource, "--as", sa, *extra, check=False)
        return proc.stdout.strip() == "yes"

    allowed = [
        ("watch", "pdfbatches.pdfqueue.io"),
        ("patch", "pdfbatches.pdfqueue.io"),
        ("patch", "pdfbatches.pdfqueue.io", "--subresource=status"),
        ("list", "deployments.apps"),
        ("patch", "deployments.apps", "--subresource=scale"),
        ("patch", "pods"),
        ("list", "horizontalpodautoscalers.autoscaling"),
        ("create", "events"),
        ("create", "leases.coordination.k8s.io"),
        ("get", "leases.coordination.k8s.io/rb-pdfqueue-operator"),
        ("update", "leases.coordination.k8s.io/rb-pdfqueue-operator"),
    ]
    for verb, resource, *extra in allowed:
        assert can(verb, resource, "-n", ns, *extra), (verb, resource, extra)
    assert can("watch", "customresourcedefinitions.apiextensions.k8s.io")
    assert can("watch", "namespaces")
    denied = [
        ("get", "secrets"),
        ("patch", "deployments.apps"),
        ("update", "deployments.apps"),
        ("delete", "pods"),
        ("create", "pdfbatches.pdfqueue.io"),
        ("delete", "pdfbatches.pdfqueue.io"),
        ("update", "leases.coordination.k8s.io/kube-controller-manager"),  # only its own Lease
        ("delete", "leases.coordination.k8s.io/rb-pdfqueue-operator"),
    ]
    for verb, resource in denied:
        assert not can(verb, resource, "-n", ns), (verb, resource)
    assert not can("watch", "pdfbatches.pdfqueue.io", "-n", "default")  # namespace-scoped
    api_sa = f"system:serviceaccount:{ns}:rb-pdfqueue-api"
    proc = cluster.kubectl("auth", "can-i", "list", "pods", "-n", ns, "--as", api_sa, check=False)
    assert proc.stdout.strip() == "no"
    cluster.kubectl("delete", "clusterrolebinding,clusterrole", f"rb-pdfqueue-operator-{ns}")


@pytest.mark.kube
def test_kustomization_builds_and_the_server_accepts_it(
    cluster: KubeCluster, tmp_path: Path
) -> None:
    k8s = tmp_path / "k8s"  # with secrets generated as the README says, outside the checkout
    shutil.copytree(ROOT / "k8s", k8s, ignore=shutil.ignore_patterns("*.env"))
    subprocess.run(
        ["bash", str(k8s / "generate-secrets.sh")],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "PDFQUEUE_SECRETS_DIR": str(k8s / "base/secrets")},
    )
    built = cluster.kubectl("kustomize", str(k8s)).stdout
    docs = [d for d in yaml.safe_load_all(built) if d]
    kinds = [d["kind"] for d in docs]
    assert set(kinds) >= {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Deployment",
        "StatefulSet",
        "Secret",
    }
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    for d in docs:  # each pod runs as an account the kustomization creates (or the default)
        if d["kind"] in WORKLOADS:
            sa = d["spec"]["template"]["spec"].get("serviceAccountName", "default")
            assert sa in accounts | {"default"}, (d["metadata"]["name"], sa)
    # The namespace must exist before the server can dry-run what goes into it.
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump(
            next(d for d in yaml.safe_load_all(built) if d and d["kind"] == "Namespace")
        ),
    )
    dry = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=built)
    assert dry.stdout.count("(server dry run)") == len(kinds), dry.stdout
    real = cluster.kubectl("apply", "-f", "-", stdin=built)
    assert real.stdout.count("\n") == len(kinds), real.stdout
    operator = "system:serviceaccount:pdfqueue:pdfqueue-operator"
    for ns, allowed in (("pdfqueue", "yes"), ("default", "no"), ("kube-system", "no")):
        for verb, resource in (("patch", "pods"), ("watch", "pdfbatches.pdfqueue.io")):
            proc = cluster.kubectl(
                "auth", "can-i", verb, resource, "-n", ns, "--as", operator, check=False
            )
            assert proc.stdout.strip() == allowed, (verb, resource, ns)
    # Clean up all but the CRD, which the rest of the session shares.
    rest = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=yaml.safe_dump_all(rest))


@pytest.mark.kube
@pytest.mark.parametrize("enabled", [False, True])
def test_the_api_reviews_tokens_only_when_it_takes_service_account_tokens(
    cluster: KubeCluster, enabled: bool
) -> None:
    """auth.kubernetesTokens binds the API's ServiceAccount to system:auth-delegator, so it
    may create TokenReviews; without it the API has no cluster-wide right at all."""
    ns = cluster.create_namespace("review")
    manifest = template(
        "-f", str(values_file("default")), "--skip-tests",
        "--set", f"auth.kubernetesTokens.enabled={str(enabled).lower()}",
        namespace=ns, release="rv",
    )  # fmt: skip
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=manifest)
    api_sa = f"system:serviceaccount:{ns}:rv-pdfqueue-api"
    review = "tokenreviews.authentication.k8s.io"
    proc = cluster.kubectl("auth", "can-i", "create", review, "--as", api_sa, check=False)
    assert (proc.stdout.strip() == "yes") is enabled
    cluster.kubectl(
        "delete", "clusterrolebinding,clusterrole", f"rv-pdfqueue-operator-{ns}",
        "--ignore-not-found",
    )  # fmt: skip
    if enabled:
        cluster.kubectl("delete", "clusterrolebinding", f"rv-pdfqueue-api-token-review-{ns}")
