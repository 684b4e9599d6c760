"""Fair dispatch: how process jobs are released when tenants compete."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field


class DispatchSettings(BaseModel):
    """Fair dispatch (docs/architecture/fair-dispatch.md).

    How process jobs are released into the queue when tenants compete.
    """

    dispatch_fair: bool = True
    """Release process jobs into the queue fairly, in windows, instead of all at ingest."""
    dispatch_window_jobs: int = Field(default=0, ge=0)
    """Most released jobs ready or running at once over all tenants; 0 means twice the
    `worker_max_jobs` of the live workers."""
    dispatch_tenant_window_jobs: int = Field(default=0, ge=0)
    """Most released jobs ready or running at once per tenant; 0 means the overall window."""
    dispatch_batch_window_jobs: int = Field(default=0, ge=0)
    """Most released jobs ready or running at once per batch; 0 means the tenant window."""
    dispatch_tenant_weights: dict[str, Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=dict
    )
    """Per-tenant weights as JSON, e.g. `{"acme": 2}`: a tenant's share of the workers when
    tenants compete; a tenant not named weighs 1."""
    dispatch_tenant_inflight_caps: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict
    )
    """Per-tenant caps on released jobs ready or running at once, as JSON, e.g.
    `{"acme": 8}`; replaces the tenant window for the tenants named."""
    dispatch_tick_s: float = Field(default=1.0, gt=0)
    """How often each worker runs the dispatcher besides when jobs finish (recovers the
    slots of jobs whose worker died)."""
