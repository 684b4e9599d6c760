"""Bearer-token authentication: each token belongs to a tenant, who sees only their batches."""

from __future__ import annotations

import hashlib
import hmac

from fastapi import HTTPException, Request, status

OPEN_TENANT = "public"


def tenant_for(tokens: dict[str, str], presented: str) -> str | None:
    """The tenant of a token; entries written `sha256:<hex>` are compared by hash."""
    digest = "sha256:" + hashlib.sha256(presented.encode()).hexdigest()
    for stored, tenant in tokens.items():
        candidate = digest if stored.startswith("sha256:") else presented
        if hmac.compare_digest(candidate.encode(), stored.encode()):
            return tenant
    return None


def require_tenant(request: Request) -> str:
    """FastAPI dependency: the caller's tenant, or 401. Open only when anonymous access was
    asked for explicitly (`PDFQUEUE_ALLOW_ANONYMOUS`); no tokens alone never opens it."""
    settings = request.app.state.settings
    tokens: dict[str, str] = settings.api_tokens
    if not tokens and settings.allow_anonymous:
        return OPEN_TENANT
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    tenant = tenant_for(tokens, token.strip()) if scheme.lower() == "bearer" else None
    if tenant is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or unknown bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return tenant
