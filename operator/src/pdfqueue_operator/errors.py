"""Why the operator refuses a PdfBatch (each a permanent error, named as its status reason),
and why it does not act at all."""

from __future__ import annotations

from pdfqueue.domain.errors import PermanentError, TransientError


class NotLeading(TransientError):
    """This process does not hold the operator's Lease (or its term has run out): it writes
    nothing to Kubernetes. Raised before a write, never after."""


class TenantNotAllowed(PermanentError):
    """The object's namespace has no tenant, or its `spec.tenant` names another one."""


class SourceNotAllowed(PermanentError):
    """The source is in the bucket but outside the folder for this tenant's manifests."""

    def __init__(self, source: str, folder: str) -> None:
        super().__init__(f"source {source!r} is not under {folder!r}, this tenant's folder")
        self.source = source


class BatchNotAdoptable(PermanentError):
    """The batch-id annotation names a batch this object may not mirror.

    Deliberately vague: whether the batch exists, and whose it is, is none of its business.
    """

    def __init__(self, batch_id: str) -> None:
        super().__init__(
            f"batch {batch_id} cannot be adopted by this object: only a batch the API created"
            " for this tenant and source, and no other object has adopted"
        )
        self.batch_id = batch_id
