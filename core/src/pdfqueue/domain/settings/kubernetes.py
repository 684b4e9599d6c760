"""The operator (Lease, scaling, PdfBatch rules) and the worker's heartbeat."""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from pdfqueue.domain.settings.values import entries
from pdfqueue.domain.tenants import valid_tenant

LEASE_JITTER = 0.1
"""The operator's Lease polls wait retry x (1 + up to this), so that standbys spread out."""
LEASE_STOP_MARGIN_S = 2.0
"""Time a leader has between its renew deadline and its lease's end to stop acting."""
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class KubernetesSettings(BaseModel):
    """Kubernetes: operator, worker heartbeat.

    The operator's Lease, scaling and PdfBatch rules, and what the worker tells it.
    """

    kubeconfig: str | None = None
    """Kubeconfig for the API and operator outside a pod; in a pod, its ServiceAccount is used."""
    pod_name: str | None = Field(default=None, validation_alias="HOSTNAME")
    """This pod's name (Kubernetes sets HOSTNAME to it): keys the worker's heartbeat."""
    worker_heartbeat_s: float = 2.0
    """How often a worker publishes its running-job count (TTL 3x) for scale-in ordering."""
    operator_scale_interval_s: float = 1.0
    """How often the operator reads the queue depth and sets the workers' replicas."""
    operator_status_interval_s: float = 2.0
    """How often the operator copies batch progress into PdfBatch `.status`."""
    operator_worker_selector: str = (
        "app.kubernetes.io/component=worker,app.kubernetes.io/part-of=pdfqueue"
    )
    """Label selector of the worker Deployments the operator scales."""
    operator_health_port: int = 8080
    """Port of the operator's `/healthz` (leader and standby alike)."""
    operator_lease_name: str = Field(
        default="pdfqueue-operator", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
    )
    """The `coordination.k8s.io` Lease the operator replicas elect their one leader through."""
    operator_lease_namespace: str | None = None
    """The Lease's namespace; unset, the pod's own namespace (outside a pod it must be set,
    unless the operator runs `--standalone`)."""
    operator_lease_duration_s: int = Field(default=8, ge=2)
    """How long a standby waits, after it last saw the Lease renewed, before it takes over a
    leader that vanished (its node died). A leader that shuts down releases it at once."""
    operator_lease_renew_deadline_s: float = Field(default=5.0, gt=0)
    """A leader that has not renewed the Lease for this long stops acting and exits; it must be
    well below the lease duration, so it has stopped before any standby may take over."""
    operator_lease_retry_period_s: float = Field(default=1.5, gt=0)
    """How often the leader renews the Lease and a standby looks at it."""
    operator_namespace_tenants: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """`namespace:tenant` pairs, comma separated: the tenant of every PdfBatch in that namespace
    (its `spec.tenant` may only repeat it). `namespace:*` trusts the namespace's writers to name
    any tenant in `spec.tenant` (the API's namespace: only the API and cluster admins may create
    PdfBatches there). PdfBatches in any other namespace are refused. PDFQUEUE_KUBERNETES_NAMESPACE,
    when set, and the operator's own namespace (in a pod) count as `*`."""
    operator_source_prefix: str = "incoming/"
    """Folder (under the storage prefix) holding the ZIPs of PdfBatch manifests, one subfolder
    per tenant: `spec.source` must be `<storage>/incoming/<tenant>/...`. Never `uploads/` or
    `pdfs/`, so a manifest cannot name an upload or a linked PDF of any tenant."""

    @model_validator(mode="after")
    def _check_lease_timing(self) -> Self:
        """retry < renew deadline < lease duration, with room to stop in between (see
        pdfqueue_operator.lease)."""
        retry = self.operator_lease_retry_period_s
        deadline = self.operator_lease_renew_deadline_s
        duration = self.operator_lease_duration_s
        if not retry * (1 + LEASE_JITTER) < deadline <= duration - LEASE_STOP_MARGIN_S:
            msg = (
                f"operator lease timing: need PDFQUEUE_OPERATOR_LEASE_RETRY_PERIOD_S ({retry:g})"
                f" x {1 + LEASE_JITTER:g} < PDFQUEUE_OPERATOR_LEASE_RENEW_DEADLINE_S ({deadline:g})"
                f" <= PDFQUEUE_OPERATOR_LEASE_DURATION_S ({duration}) - {LEASE_STOP_MARGIN_S:g}"
            )
            raise ValueError(msg)
        return self

    @field_validator("operator_namespace_tenants", mode="before")
    @classmethod
    def _parse_namespace_tenants(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        mapping: dict[str, str] = {}
        for entry in entries(value):
            namespace, _, tenant = (part.strip() for part in entry.partition(":"))
            if not _NAMESPACE.fullmatch(namespace) or not (tenant == "*" or valid_tenant(tenant)):
                msg = f"PDFQUEUE_OPERATOR_NAMESPACE_TENANTS entry {entry[:80]!r} is not ns:tenant"
                raise ValueError(msg)
            if namespace in mapping:
                msg = f"PDFQUEUE_OPERATOR_NAMESPACE_TENANTS names namespace {namespace!r} twice"
                raise ValueError(msg)
            mapping[namespace] = tenant
        return mapping

    @field_validator("operator_source_prefix")
    @classmethod
    def _check_source_prefix(cls, value: str) -> str:
        segments = value.strip("/").split("/")
        if any(not _SEGMENT.fullmatch(s) for s in segments) or segments[0] in {"uploads", "pdfs"}:
            msg = (
                f"PDFQUEUE_OPERATOR_SOURCE_PREFIX {value!r} must be a plain folder"
                " other than uploads/ and pdfs/"
            )
            raise ValueError(msg)
        return "/".join(segments) + "/"
