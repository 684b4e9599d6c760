"""Tenants of their own for quota tests: the real app with per-test quotas (a pytest plugin:
fixture `tenant_api`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from pdfqueue.domain.settings import Settings
from tests.support.helpers import GLOBEX_TOKEN

TenantApi = Callable[..., Any]


@asynccontextmanager
async def app_client(
    settings: Settings, headers: dict[str, str]
) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with these settings (lifespan included), sending `headers`."""
    from pdfqueue_api.app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://pdfqueue.test", headers=headers, timeout=30
        ) as client:
            yield client


@pytest.fixture
def tenant_api(settings: Settings) -> TenantApi:
    """A client of a tenant of its own (quota counters are per tenant, in a shared Redis):
    `tenant, client = tenant_api(concurrent_batches=2)`; quotas not named are off."""

    def make(**quotas: Any) -> Any:
        tenant = f"q-{uuid.uuid4().hex[:12]}"
        token = uuid.uuid4().hex
        tokens = {token: tenant, GLOBEX_TOKEN: "globex"}
        limits = {
            "quota_uploads_per_minute": 0,
            "quota_bytes_per_day": 0,
            "quota_concurrent_batches": 0,
            "quota_retries_per_hour": 0,
        }
        limits.update({f"quota_{k}": v for k, v in quotas.items()})
        tuned = settings.model_copy(update={"api_tokens": tokens, **limits})
        client = app_client(tuned, {"Authorization": f"Bearer {token}"})
        return tenant, client

    return make
