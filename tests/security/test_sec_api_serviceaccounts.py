"""Kubernetes ServiceAccount tokens on the real API server (the session's control plane): a
projected token for the audience `pdfqueue`, of an account in a namespace that
PDFQUEUE_OPERATOR_NAMESPACE_TENANTS names, reaches that tenant through a TokenReview; a token
for another audience, of a namespace named `*` or not named, or of an account deleted since,
is refused with 401."""

from __future__ import annotations

import httpx
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_api import serviceaccounts
from pdfqueue_dev.processes import wait_until_async
from tests.security.test_sec_api import serve
from tests.support.helpers import ACME
from tests.support.kubefix import KubeCluster

pytestmark = pytest.mark.kube


def _token(cluster: KubeCluster, namespace: str, account: str, *audience: str) -> str:
    args = ["-n", namespace, "create", "token", account, "--duration", "10m"]
    args += [f"--audience={a}" for a in audience]
    return cluster.kubectl(*args).stdout.strip()


async def _batches(client: httpx.AsyncClient, token: str) -> httpx.Response:
    return await client.get("/v1/batches", headers={"Authorization": f"Bearer {token}"})


async def test_a_service_account_token_reaches_its_namespaces_tenant(
    settings: Settings, kube_cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serviceaccounts, "CACHE_S", 0.0)  # every request asks the API server
    hr, open_ns, other = (kube_cluster.create_namespace(p) for p in ("sa-hr", "sa-any", "sa-no"))
    for namespace in (hr, open_ns, other):
        kube_cluster.kubectl("-n", namespace, "create", "serviceaccount", "uploader")
    cluster_settings = settings.model_copy(
        update={
            "kubernetes_tokens": True,
            "kubeconfig": str(kube_cluster.kubeconfig),
            "operator_namespace_tenants": {hr: "acme", open_ns: "*"},
        }
    )
    good = _token(kube_cluster, hr, "uploader", "pdfqueue")
    refused = {
        "the API server's audience": _token(kube_cluster, hr, "uploader"),
        "a namespace named *": _token(kube_cluster, open_ns, "uploader", "pdfqueue"),
        "a namespace not named": _token(kube_cluster, other, "uploader", "pdfqueue"),
    }
    async with serve(cluster_settings) as client:
        answer = await _batches(client, good)
        assert answer.status_code == 200
        assert answer.json() == (await client.get("/v1/batches", headers=ACME)).json()
        codes = {
            name: (await _batches(client, token)).status_code for name, token in refused.items()
        }
        assert codes == dict.fromkeys(refused, 401)
        kube_cluster.kubectl("-n", hr, "delete", "serviceaccount", "uploader", "--wait=true")

        async def revoked() -> bool:  # the API server's own account lookup is cached briefly
            return (await _batches(client, good)).status_code == 401

        await wait_until_async(revoked, "the deleted account's token refused", timeout_s=30)
