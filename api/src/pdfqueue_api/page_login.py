"""The page's "Sign in" at the OIDC issuer (`PDFQUEUE_OIDC_PAGE_CLIENT_ID`).

The page runs the authorization code flow with PKCE itself, as a public client (RFC 7636; no
client secret, since nothing in a browser stays secret). The API only tells it where the
issuer's two endpoints are, read from the issuer's discovery document, which the API fetches,
checks and keeps. It checks what a browser could not: that the document names the configured
issuer (OIDC Discovery 1.0, 4.3: else a document from elsewhere could send the users' codes to
another host), and that both endpoints are https (or http on a loopback address, a provider
on the same machine), so no code or token crosses a network in clear. The page's CSP then
lets the page connect to the token endpoint's origin, and to no other.

A document refused, or an issuer not answering, turns the page's sign-in off (the reason in
the log) until the next try, a minute later; the token field works as before.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from pdfqueue.domain.errors import ConfigurationError
from pdfqueue.domain.settings import Settings

log = logging.getLogger(__name__)
DISCOVERY_TIMEOUT_S = 5.0
KEEP_S = 3600.0
"""A discovery document is kept this long: issuers move their endpoints rarely."""
RETRY_S = 60.0
"""After a refused document or a failed fetch, the page goes without sign-in this long, so a
flood of page loads costs the issuer one request a minute."""
NETLOC = re.compile(r"([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")
"""A host and port as a CSP source may name them: nothing that could end the directive."""


class DiscoveryRefused(ConfigurationError, ValueError):
    """The issuer's discovery document is not one the page may sign in with."""


@dataclass(frozen=True)
class PageLoginConfig:
    """What the page needs to sign in: the endpoints, its client id and scopes."""

    authorization_endpoint: str
    token_endpoint: str
    client_id: str
    scopes: str

    @property
    def token_origin(self) -> str:
        """The one origin the page's CSP lets it connect to beyond its own."""
        return origin(self.token_endpoint)

    def for_page(self) -> dict[str, str]:
        return {
            "authorize": self.authorization_endpoint,
            "token": self.token_endpoint,
            "client": self.client_id,
            "scopes": self.scopes,
        }


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def checked_url(url: object, what: str) -> str:
    """`url` if a browser may be sent there with a code or a token: https, or http on a
    loopback address; no user name or password in it, no fragment."""
    if not isinstance(url, str) or not url:
        msg = f"{what} is missing"
        raise DiscoveryRefused(msg)
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        msg = f"{what} {url!r} is not an http(s) URL"
        raise DiscoveryRefused(msg)
    if parts.scheme == "http" and not _loopback(parts.hostname):
        msg = f"{what} {url!r} is neither https nor on a loopback address"
        raise DiscoveryRefused(msg)
    if parts.username is not None or parts.fragment or not NETLOC.fullmatch(parts.netloc.lower()):
        msg = f"{what} {url!r} has credentials, a fragment or an unusual host"
        raise DiscoveryRefused(msg)
    return url


def origin(url: str) -> str:
    """The origin (scheme, host, port) of a URL `checked_url` accepted."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.lower()}"


def parse_discovery(document: object, issuer: str, client_id: str, scopes: str) -> PageLoginConfig:
    """The page's sign-in, with `client_id` and `scopes`, at the endpoints of `issuer`'s
    discovery document; DiscoveryRefused for a document the page may not use."""
    if not isinstance(document, dict):
        msg = "the discovery document is not a JSON object"
        raise DiscoveryRefused(msg)
    if document.get("issuer") != issuer:
        msg = f"the discovery document names the issuer {document.get('issuer')!r}"
        raise DiscoveryRefused(msg)
    methods = document.get("code_challenge_methods_supported")
    if methods is not None and (not isinstance(methods, list) or "S256" not in methods):
        msg = f"the issuer offers PKCE with {methods!r}, not S256"
        raise DiscoveryRefused(msg)
    return PageLoginConfig(
        authorization_endpoint=checked_url(
            document.get("authorization_endpoint"), "authorization_endpoint"
        ),
        token_endpoint=checked_url(document.get("token_endpoint"), "token_endpoint"),
        client_id=client_id,
        scopes=scopes,
    )


class PageLogin:
    """The issuer's endpoints for the page, fetched when a page is served and kept."""

    def __init__(self, settings: Settings) -> None:
        if not (settings.oidc_issuer and settings.oidc_page_client_id):
            msg = "the page's sign-in needs an issuer and a client id"
            raise ValueError(msg)
        self.issuer = settings.oidc_issuer
        self.client_id = settings.oidc_page_client_id
        self.scopes = settings.oidc_page_scopes
        self.discovery_url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        self._config: PageLoginConfig | None = None
        self._until = 0.0
        self._lock = asyncio.Lock()

    async def config(self) -> PageLoginConfig | None:
        """The sign-in the page offers, or None (sign-in off for now: see the log)."""
        async with self._lock:  # one fetch at a time, however many pages are loading
            if time.monotonic() < self._until:
                return self._config
            self._config = await self._discover()
            self._until = time.monotonic() + (KEEP_S if self._config else RETRY_S)
            return self._config

    async def _discover(self) -> PageLoginConfig | None:
        try:
            checked_url(self.issuer, "the issuer")
            async with httpx.AsyncClient(timeout=DISCOVERY_TIMEOUT_S) as client:
                answer = await client.get(self.discovery_url)  # redirects are not followed
                answer.raise_for_status()
                document = answer.json()
            found = parse_discovery(document, self.issuer, self.client_id, self.scopes)
        except (httpx.HTTPError, ValueError) as exc:  # DiscoveryRefused and bad JSON too
            log.warning("OIDC: the page offers no sign-in: %s (%s)", exc, self.discovery_url)
            return None
        log.info("OIDC: the page signs in at %s", found.authorization_endpoint)
        return found
