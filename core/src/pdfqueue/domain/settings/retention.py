"""How long uploads, batches and the audit trail are kept."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field


class RetentionSettings(BaseModel):
    """Retention: how long what pdfqueue keeps is kept.

    Uploads, batches and the audit trail each expire on their own clock.
    """

    uploads_expire_days: int = Field(default=7, ge=0)
    """Uploaded ZIPs (`uploads/`) expire this many days after upload, through an S3 lifecycle
    rule that `pdfqueue migrate` sets (0: no rule). A retry needs the ZIP, so keep it above the
    time a batch may wait for one. Stores without lifecycle support get a warning instead."""
    retention_days: int = Field(default=30, ge=0, le=36500)
    """A batch that ended this many days ago is purged: its per-file rows (file names are
    often people's names), its batch row, webhook records and ZIP; the PDFs it linked and the
    links stay. 0 keeps batches for ever."""
    tenant_retention_days: dict[str, Annotated[int, Field(ge=0, le=36500)]] = Field(
        default_factory=dict
    )
    """Per-tenant retention in days as JSON, e.g. `{"acme": 7, "archive": 0}`, over
    `retention_days`."""
    audit_retention_days: int = Field(default=400, ge=0, le=36500)
    """How long the audit trail of purges and erasures is kept (0: for ever); longer than the
    batches it describes, so that a removal can be shown after the fact."""

    @property
    def retry_window_s(self) -> int:
        """How long a finished batch keeps what only a retry needs in Redis (the PdfBatch
        mirroring it): as long as its ZIP is kept, a week when uploads never expire."""
        return (self.uploads_expire_days or 7) * 86400
