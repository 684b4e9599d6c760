"""A client of the Kubernetes API server: this pod's ServiceAccount, else a kubeconfig.

For the API (PdfBatch objects of uploads) and the operator; the worker never reaches the API
server, and its image has no Kubernetes client (the `kube` extra of this package).
"""

from __future__ import annotations

from pathlib import Path

from kubernetes.aio import client, config
from kubernetes.aio.config.config_exception import ConfigException

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


async def connect(kubeconfig: str | None) -> client.ApiClient:
    """A client for `kubeconfig` when given; else for the ServiceAccount of this pod, else for
    the default kubeconfig (as kopf logs in)."""
    cfg = client.Configuration()
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException:
            await config.load_kube_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def own_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """The namespace of this pod's ServiceAccount; None outside a pod."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None
