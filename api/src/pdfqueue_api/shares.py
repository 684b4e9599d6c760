"""What a read route holds while it runs: one of its tenant's read or report slots."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import Depends

from pdfqueue_api.auth import Tenant
from pdfqueue_api.dependencies import Service


async def _read_slot(tenant: Tenant, service: Service) -> AsyncIterator[None]:
    """One of the tenant's reads in flight (429 past PDFQUEUE_QUOTA_CONCURRENT_READS)."""
    async with service.reads.held(tenant):
        yield


async def _report_slot(tenant: Tenant, service: Service) -> AsyncIterator[None]:
    """One of the tenant's whole reports (429 past PDFQUEUE_QUOTA_CONCURRENT_REPORTS)."""
    async with service.reports.held(tenant):
        yield


ReadSlot = Depends(_read_slot, scope="function")
"""Held while the route runs and freed before its answer is sent: an event stream holds
none while it streams (it has a share of its own, PDFQUEUE_MAX_EVENT_STREAMS_PER_TENANT)."""
ReportSlot = Depends(_report_slot)
"""Held until the report's last byte is sent, or the response ends otherwise."""
