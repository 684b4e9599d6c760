"""The operator's own Kubernetes calls (kubernetes.aio), beside kopf's watches and patches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.aio import client
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.client.models import CoreV1Event

from pdfqueue.domain.pdfbatch import GROUP, PLURAL, VERSION
from pdfqueue_operator.errors import NotLeading
from pdfqueue_operator.model import ObjectRef

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "pdfqueue-operator"
TIMEOUT_S = 10.0


def always() -> bool:
    return True


class Kube:
    """Typed shortcuts over one ApiClient; 404 and 409 come back as values, not exceptions.

    Every write first asks `leading` (the election's: this process holds the Lease and is
    within its term) and raises NotLeading if not: a leader paused past its term (a stopped
    process, a frozen VM) must not write on the moment it wakes, before its election loop
    has noticed. `instance` names this process in the Events it posts.
    """

    def __init__(
        self,
        api: client.ApiClient,
        leading: Callable[[], bool] = always,
        instance: str | None = None,
    ) -> None:
        self.api = api
        self.leading = leading
        self.instance = instance
        self.custom = client.CustomObjectsApi(api)
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)

    async def close(self) -> None:
        await self.api.close()

    def check_leading(self) -> None:
        if not self.leading():
            raise NotLeading("this operator does not hold the Lease: it writes nothing")

    # --- PdfBatch ---------------------------------------------------------------------------
    async def get_pdfbatch(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The object, or None if it is gone (or was replaced by another of the same name)."""
        try:
            found = await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, ref.namespace, PLURAL, ref.name, _request_timeout=TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        body = _custom_object(found)
        return body if body["metadata"]["uid"] == ref.uid else None

    async def patch_pdfbatch_status(
        self, ref: ObjectRef, status: Mapping[str, Any], resource_version: str
    ) -> bool:
        """Merge-patch `.status` if the object is still at `resource_version` (else False).

        The version is the precondition: a merge patch of the status subresource ignores a
        uid, so this is what keeps a same-named newer object from getting our counters.
        """
        body = {"metadata": {"resourceVersion": resource_version}, "status": dict(status)}
        self.check_leading()
        try:
            await self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, ref.namespace, PLURAL, ref.name, body, _request_timeout=TIMEOUT_S
            )
        except ApiException as exc:
            if exc.status in {404, 409}:
                return False
            raise
        return True

    # --- worker Deployments -----------------------------------------------------------------
    async def get_replicas(self, namespace: str, name: str) -> int:
        scale = await self.apps.read_namespaced_deployment_scale(
            name, namespace, _request_timeout=TIMEOUT_S
        )
        return int(scale.spec.replicas or 0) if scale.spec else 0

    async def set_replicas(self, namespace: str, name: str, replicas: int) -> None:
        """Through the scale subresource: the Deployment's spec is never written."""
        self.check_leading()
        await self.apps.patch_namespaced_deployment_scale(
            name,
            namespace,
            {"spec": {"replicas": replicas}},
            _content_type=MERGE_PATCH,
            _request_timeout=TIMEOUT_S,
        )

    async def pods(self, namespace: str, match_labels: Mapping[str, str]) -> list[Any]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
        found = await self.core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=TIMEOUT_S
        )
        return [p for p in found.items if p.metadata and not p.metadata.deletion_timestamp]

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.check_leading()
        await self.core.patch_namespaced_pod(
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            _content_type=MERGE_PATCH,
            _request_timeout=TIMEOUT_S,
        )

    # --- Events -----------------------------------------------------------------------------
    async def event(
        self, involved: Mapping[str, str], type_: str, reason: str, message: str
    ) -> None:
        """Post an Event about `involved` (apiVersion, kind, namespace, name, uid); best effort."""
        now = datetime.now(UTC)
        body = {
            "metadata": {
                "generateName": f"{involved['name']}.",
                "namespace": involved["namespace"],
            },
            "involvedObject": dict(involved),
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
        }
        if self.instance:
            body["reportingInstance"] = self.instance[:128]
        try:
            self.check_leading()
            await self.core.create_namespaced_event(
                involved["namespace"], CoreV1Event.model_validate(body), _request_timeout=TIMEOUT_S
            )
        except Exception as exc:  # an Event is a courtesy; the log line already says it
            log.warning("could not post event %s on %s: %r", reason, involved["name"], exc)


def _custom_object(found: object) -> dict[str, Any]:
    """A custom object as the API server returns it (the client declares only `object`)."""
    if not isinstance(found, dict):
        raise TypeError(f"custom object is a {type(found).__name__}, not a JSON object")
    return found
