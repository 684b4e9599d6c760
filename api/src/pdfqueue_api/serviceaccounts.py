"""Kubernetes ServiceAccount tokens as a way in: the API server says whose a token is (a
TokenReview), and the tenant is the one PDFQUEUE_OPERATOR_NAMESPACE_TENANTS gives the
account's namespace, the rule a PdfBatch in that namespace follows. A job in the cluster then
uploads with its own projected token (audience `pdfqueue`), and no static token is handed out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time

from kubernetes.aio import client

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.kubeapi import connect

log = logging.getLogger(__name__)
TIMEOUT_S = 2.0
"""A TokenReview waits at most this long for the API server (then the token is refused)."""
CACHE_S = 60.0
"""How long the API server's answer for one token is kept: a client's requests cost one
review a minute, and a token revoked (its pod or account deleted) stops working within it."""
CACHE_MAX = 10_000
USERNAME = re.compile(r"^system:serviceaccount:([a-z0-9][-a-z0-9]*):[^:]+$")


class ServiceAccountTokens:
    """Tokens of the cluster's ServiceAccounts, reviewed by the API server."""

    def __init__(self, settings: Settings) -> None:
        self.kubeconfig = settings.kubeconfig
        self.audience = settings.kubernetes_token_audience
        self.namespaces = settings.operator_namespace_tenants
        self._api: client.ApiClient | None = None
        self._seen: dict[str, tuple[float, str | None]] = {}

    async def tenant(self, token: str) -> str | None:
        """The tenant of a valid token of a ServiceAccount in a namespace that names one."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._seen.get(key)
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1]
        try:
            namespace = await asyncio.wait_for(self._review(token), TIMEOUT_S)
        except (
            Exception
        ) as exc:  # the API server unreachable or refusing us: not this token's fault
            log.warning("ServiceAccount token not reviewed: %r", exc)
            return None
        tenant = self.namespaces.get(namespace) if namespace else None
        if tenant == "*":  # writers there may name any tenant: no tenant of its own
            tenant = None
        if len(self._seen) >= CACHE_MAX:
            self._seen.clear()
        self._seen[key] = (now, tenant)
        return tenant

    async def _review(self, token: str) -> str | None:
        """The token's namespace if the API server authenticates it for our audience."""
        if self._api is None:
            self._api = await connect(self.kubeconfig)
        body = client.V1TokenReview(
            spec=client.V1TokenReviewSpec(token=token, audiences=[self.audience])
        )
        review = await client.AuthenticationV1Api(self._api).create_token_review(body)
        status = review.status
        if not status or not status.authenticated or self.audience not in (status.audiences or []):
            return None
        found = USERNAME.match((status.user.username if status.user else None) or "")
        return found.group(1) if found else None

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
