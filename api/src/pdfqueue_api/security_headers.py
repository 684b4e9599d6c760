"""Security headers on every response: a CSP, no sniffing, no referrer, no caching of data."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def page_csp(token_origin: str | None = None) -> str:
    """The upload page's CSP: its own script, style and API only; never framed
    (clickjacking). With the page's sign-in on, it may also connect to the issuer's token
    endpoint's origin (to exchange its code), and to no other."""
    connect = f"'self' {token_origin}" if token_origin else "'self'"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src {connect}; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'"
    )


PAGE_CSP = page_csp()
"""The page's CSP without sign-in (and what any other HTML response gets)."""
DATA_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
"""Everything else (JSON, CSV, assets): nothing may load or run if a browser renders it."""
ALWAYS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers without CSP level 2
}


def security_headers(content_type: str) -> dict[str, str]:
    """The headers one response gets, by what it is."""
    page = content_type.split(";", maxsplit=1)[0].strip().lower() == "text/html"
    return {
        **ALWAYS,
        "Content-Security-Policy": PAGE_CSP if page else DATA_CSP,
        # Reports and status carry tenants' data: no browser or proxy keeps a copy. A route
        # that sets its own Cache-Control (the page's static assets) keeps it.
        "Cache-Control": "no-store",
    }


class SecurityHeadersMiddleware:
    """Adds `security_headers` to every HTTP response, without replacing a route's own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in security_headers(headers.get("content-type", "")).items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)
