"""The PdfBatch custom resource as the API and the operator both see it: names and manifest."""

from __future__ import annotations

from typing import Any

GROUP = "pdfqueue.io"
VERSION = "v1alpha1"
PLURAL = "pdfbatches"
KIND = "PdfBatch"
BATCH_ID_ANNOTATION = "pdfqueue.io/batch-id"
"""Set by the API on the objects it creates: the batch exists already, under this id. The
operator lets one object adopt such a batch, once, and only if tenant and source match."""
DEFAULT_TENANT = "kubernetes"
"""`spec.tenant` when a manifest leaves it out (the CRD's default says the same); in a
namespace mapped to a tenant it means "this namespace's tenant"."""


def object_name(batch_id: str) -> str:
    """The name the API gives the PdfBatch of an upload."""
    return f"batch-{batch_id}"


def manifest(batch_id: str, source_url: str, tenant: str) -> dict[str, Any]:
    """The PdfBatch the API creates for an upload it has already registered."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": object_name(batch_id),
            "annotations": {BATCH_ID_ANNOTATION: batch_id},
            "labels": {
                "app.kubernetes.io/part-of": "pdfqueue",
                "app.kubernetes.io/managed-by": "pdfqueue-api",
            },
        },
        "spec": {"source": source_url, "tenant": tenant},
    }
