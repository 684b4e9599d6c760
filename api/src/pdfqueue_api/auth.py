"""Bearer-token authentication: each token belongs to a tenant, who sees only their batches:
a static token (PDFQUEUE_API_TOKENS), an OpenID Connect access token (`pdfqueue_api.oidc`) or
a ServiceAccount token of the cluster (`pdfqueue_api.serviceaccounts`)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pdfqueue.domain.tenants import tenant_for
from pdfqueue_api.dependencies import Runtime
from pdfqueue_api.oidc import looks_like_jwt

OPEN_TENANT = "public"
BEARER = HTTPBearer(auto_error=False, description="A tenant's token (PDFQUEUE_API_TOKENS).")
"""Declares the scheme in /openapi.json; the checking below is ours (401, not FastAPI's 403)."""


async def require_tenant(
    runtime: Runtime,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> str:
    """FastAPI dependency: the caller's tenant, or 401. Open only when anonymous access was
    asked for explicitly (`PDFQUEUE_ALLOW_ANONYMOUS`); no tokens alone never opens it."""
    tokens = runtime.tokens()
    if not tokens and runtime.settings.allow_anonymous:
        return OPEN_TENANT
    presented = credentials.credentials.strip() if credentials else ""
    tenant = tenant_for(tokens, presented) if presented else None
    if tenant is None and looks_like_jwt(presented):
        if runtime.oidc is not None:  # may fetch the issuer's keys: off the event loop
            tenant = await asyncio.to_thread(runtime.oidc.tenant, presented)
        if tenant is None and runtime.service_accounts is not None:
            tenant = await runtime.service_accounts.tenant(presented)
    if tenant is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or unknown bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return tenant


Tenant = Annotated[str, Depends(require_tenant)]
"""A route parameter: the caller's tenant (401 before the route runs without one)."""
