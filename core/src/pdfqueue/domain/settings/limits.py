"""Limits on what one tenant and one archive may take: quotas, read slots, ZIP bounds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

API_POOL_CONNECTIONS = 10
"""PostgreSQL connections of one API process; one tenant's reads hold fewer
(`quota_concurrent_reads`)."""


class Quota(BaseModel):
    """One tenant's limits on uploads and retries; 0 means no limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uploads_per_minute: int = Field(ge=0)
    bytes_per_day: int = Field(ge=0)
    concurrent_batches: int = Field(ge=0)
    retries_per_hour: int = Field(ge=0)


class TenantQuota(BaseModel):
    """An entry of PDFQUEUE_TENANT_QUOTAS: the quotas it names replace the defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uploads_per_minute: int | None = Field(default=None, ge=0)
    bytes_per_day: int | None = Field(default=None, ge=0)
    concurrent_batches: int | None = Field(default=None, ge=0)
    retries_per_hour: int | None = Field(default=None, ge=0)


class QuotaSettings(BaseModel):
    """Per-tenant quotas on uploads and retries (429 with Retry-After; 0: no quota).

    Counted over every API process, in Redis.
    """

    quota_uploads_per_minute: int = Field(default=30, ge=0)
    """Uploads one tenant may start in any 60 s."""
    quota_bytes_per_day: int = Field(default=50 * 1024**3, ge=0)
    """Bytes one tenant may upload per UTC day, counted as they stream (refused ones too)."""
    quota_concurrent_batches: int = Field(default=10, ge=0)
    """Batches of one tenant not yet COMPLETED, FAILED or CANCELLED, uploads in progress
    included."""
    quota_retries_per_hour: int = Field(default=20, ge=0)
    """Retry requests (`POST /v1/batches/{id}/retry`) one tenant may make in any 3600 s; a
    retry also takes a concurrent-batch slot like an upload."""
    tenant_quotas: dict[str, TenantQuota] = Field(default_factory=dict)
    """Per-tenant overrides as JSON, e.g. `{"acme": {"bytes_per_day": 0}}`; a quota not
    named keeps the default above."""

    def quota_for(self, tenant: str) -> Quota:
        """The tenant's quotas: its PDFQUEUE_TENANT_QUOTAS entry over the defaults."""
        default = Quota(
            uploads_per_minute=self.quota_uploads_per_minute,
            bytes_per_day=self.quota_bytes_per_day,
            concurrent_batches=self.quota_concurrent_batches,
            retries_per_hour=self.quota_retries_per_hour,
        )
        override = self.tenant_quotas.get(tenant)
        if override is None:
            return default
        return default.model_copy(update=override.model_dump(exclude_none=True))


class ReadSettings(BaseModel):
    """Per-tenant bounds on reads, per API process (429 with Retry-After past them).

    One tenant's heavy reads wait for its own slots, never the others'.
    """

    quota_concurrent_reports: int = Field(default=2, ge=1)
    """Whole reports (`GET /v1/batches/{id}/files`, JSON or CSV) one tenant may stream at once
    from one API process, a slow reader's for as long as it reads. One more waits up to 1 s
    for a slot, then gets 429 with Retry-After; its memory is one page of rows whatever the
    report's size."""
    quota_concurrent_reads: int = Field(default=4, ge=1)
    """Reads one tenant may have in flight at once in one API process: a status, a list, a
    report page, an event stream's opening, and each page of a whole report. Each holds at
    most one of the API's PostgreSQL connections, so a tenant holds at most this many and the
    rest stay for the other tenants (it must be below `API_POOL_CONNECTIONS`). One more waits
    up to 1 s for a slot, then gets 429 with Retry-After."""

    @field_validator("quota_concurrent_reads")
    @classmethod
    def _check_read_share(cls, value: int) -> int:
        if value >= API_POOL_CONNECTIONS:
            msg = (
                f"PDFQUEUE_QUOTA_CONCURRENT_READS must be below the API's {API_POOL_CONNECTIONS}"
                " PostgreSQL connections, so that one tenant's reads leave some to the others"
            )
            raise ValueError(msg)
        return value


class ArchiveSettings(BaseModel):
    """Batches and archives.

    What one ZIP may hold, checked before and while it is read.
    """

    batch_ttl_s: int = 3600
    """Live state in Redis expires this long after the batch's last activity."""
    max_members: int = 100_000
    """Most ZIP members one upload may hold (directories included)."""
    max_directory_bytes: int = Field(default=32 * 1024**2, ge=0)
    """Largest ZIP central directory, read before any member: 100,000 entries with names of
    ~200 bytes fit, while a directory of millions of empty entries is refused up front."""
    max_pdf_bytes: int = 16 * 1024**2
    """Largest uncompressed size of one member: a résumé is well under 1 MiB, 16 MiB leaves
    room for scans. Members inflate in the parsing process, under its memory limit."""
    max_total_uncompressed_bytes: int = 20 * 1024**3
    """Largest sum of uncompressed member sizes in one ZIP."""
    max_compression_ratio: float = 200.0
    """Largest uncompressed/compressed ratio of one member; higher looks like a zip bomb."""
