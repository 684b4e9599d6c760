"""In Kubernetes mode, a PdfBatch object for each upload, so `kubectl get pdfbatches` shows it."""

from __future__ import annotations

import asyncio
import logging

from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException

from pdfqueue.domain.pdfbatch import GROUP, PLURAL, VERSION, manifest
from pdfqueue.stores.kubeapi import connect

log = logging.getLogger(__name__)
TIMEOUT_S = 2.0
"""An upload's answer waits at most this long for the API server (then it is logged)."""


class PdfBatchPublisher:
    """Creates the PdfBatch of each upload; its failures are logged, never the upload's."""

    def __init__(self, namespace: str, kubeconfig: str | None = None) -> None:
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self._api: client.ApiClient | None = None

    async def _client(self) -> client.ApiClient:
        if self._api is None:
            self._api = await connect(self.kubeconfig)
        return self._api

    async def publish(self, batch_id: str, source_url: str, tenant: str) -> bool:
        """Create `batch-<id>`; the operator finds the batch registered and only mirrors it."""
        body = manifest(batch_id, source_url, tenant)
        try:
            api = client.CustomObjectsApi(await self._client())
            await asyncio.wait_for(
                api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body),
                TIMEOUT_S,
            )
        except ApiException as exc:
            if exc.status == 409:  # a retried request: the object is there already
                return True
            log.warning(
                "PdfBatch not created (HTTP %s): %s", exc.status, exc.reason, extra=_ctx(batch_id)
            )
        except Exception as exc:  # unreachable API server, no credentials: the batch still runs
            log.warning("PdfBatch not created: %r", exc, extra=_ctx(batch_id))
        else:
            return True
        return False

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()


def _ctx(batch_id: str) -> dict[str, str]:
    return {"batch_id": batch_id}
