"""The page's "Sign in" (PDFQUEUE_OIDC_PAGE_CLIENT_ID) against an OpenID provider made here.

The provider is a small HTTP server with keys made in the test (`Issuer`, as for the access
tokens): a discovery document, an /authorize that signs its one test user in at once and
sends the browser back with a code, a /token that checks the code (once), the client id, the
redirect URI and the PKCE verifier against the challenge (S256) before it answers with a
signed access token, and the JWKS the API verifies that token with.

In headless Chromium, under the page's CSP: the page signs in, comes back signed in and
uploads and lists as the tenant of the token's claim. Refused: an answer whose `state` is not
the page's (no token asked for, none stored), a code replayed, a verifier that does not
match (the provider refuses; the page says so), and an expired token (the page says signed
out, and does not sign in again by itself). Without a browser: the API offers no sign-in, and
logs why, for a discovery document of another issuer, an endpoint over plain http to a host
that is not loopback, and other documents it cannot trust.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_api.page_login import DiscoveryRefused, checked_url, origin
from pdfqueue_api.security_headers import PAGE_CSP
from tests.security.test_sec_api import serve
from tests.security.test_sec_api_oidc import AUDIENCE, Issuer
from tests.support.browser import DevTools
from tests.support.helpers import ACME, GLOBEX, GLOBEX_TOKEN, MakeCorpus

CLIENT_ID = "pdfqueue-page"
TENANT = "globex"
"""The test user's tenant, named in the access token's claim (not a static token's)."""


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass
class Provider:
    """What the provider does, what it was asked, and the ways a test makes it misbehave."""

    keys: Issuer
    base: str = ""
    redirect_uris: set[str] = field(default_factory=set)
    discovery: dict[str, Any] = field(default_factory=dict)
    """Entries that replace the discovery document's own."""
    codes: dict[str, dict[str, str]] = field(default_factory=dict)
    callbacks: list[str] = field(default_factory=list)
    """Every URL /authorize sent the browser back to."""
    token_requests: list[dict[str, str]] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    discoveries: int = 0
    tamper_state: bool = False
    """/authorize sends back a `state` that is not the one it was given."""
    replay_code: str | None = None
    """/authorize sends back this (already used) code instead of a fresh one."""
    foreign_challenge: bool = False
    """/authorize keeps another verifier's challenge: the page's verifier will not match."""
    token_claims: dict[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        self.discoveries += 1
        return {
            "issuer": self.base,
            "authorization_endpoint": f"{self.base}/authorize",
            "token_endpoint": f"{self.base}/token",
            "jwks_uri": f"{self.base}/jwks.json",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        } | self.discovery

    def authorize(self, query: dict[str, str]) -> str:
        """The URL the browser goes back to; raises ValueError for a request to refuse."""
        if query.get("response_type") != "code" or query.get("client_id") != CLIENT_ID:
            raise ValueError("not a code request of the page's client")
        if query.get("redirect_uri") not in self.redirect_uris:
            raise ValueError(f"redirect_uri {query.get('redirect_uri')!r} not registered")
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            raise ValueError("no S256 challenge")
        code = self.replay_code or secrets.token_urlsafe(16)
        challenge = _s256("another verifier") if self.foreign_challenge else query["code_challenge"]
        self.codes.setdefault(
            code, {"challenge": challenge, "redirect_uri": query["redirect_uri"], "used": ""}
        )
        state = query.get("state", "") + ("-forged" if self.tamper_state else "")
        url = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': state})}"
        self.callbacks.append(url)
        return url

    def token(self, form: dict[str, str]) -> str:
        """The access token for a valid code; raises ValueError (invalid_grant) otherwise."""
        self.token_requests.append(form)
        issued = self.codes.get(form.get("code", ""))
        if issued is None or issued["used"]:
            raise ValueError("unknown or used code")
        issued["used"] = "yes"  # a code is good once, whatever the outcome
        if form.get("grant_type") != "authorization_code" or form.get("client_id") != CLIENT_ID:
            raise ValueError("not the page's client")
        if form.get("redirect_uri") != issued["redirect_uri"]:
            raise ValueError("another redirect_uri")
        if _s256(form.get("code_verifier", "")) != issued["challenge"]:
            raise ValueError("code_verifier does not match the challenge")
        claims = {"iss": self.base, "aud": AUDIENCE, "tenant": TENANT, "sub": "user-1"}
        return self.keys.token(**(claims | self.token_claims))


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                self._json(200, provider.document())
            elif url.path == "/jwks.json":
                self._json(200, json.loads(provider.keys.jwks()))
            elif url.path == "/authorize":
                try:
                    location = provider.authorize(query)
                except ValueError as exc:
                    provider.refusals.append(str(exc))
                    self._json(400, {"error": "invalid_request"})
                    return
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self._json(404, {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            try:
                self._json(200, {"access_token": provider.token(form), "token_type": "Bearer"})
            except ValueError as exc:
                provider.refusals.append(str(exc))
                self._json(400, {"error": "invalid_grant"})

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            # the page's origin may read the token answer (CORS), as an issuer's web origins
            self.send_header("Access-Control-Allow-Origin", self.headers.get("Origin", "*"))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def provider() -> Iterator[Provider]:
    found = Provider(Issuer())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found))
    found.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def settings(settings: Settings, provider: Provider) -> Settings:
    """The suite's settings, the API trusting the provider and offering the page's sign-in."""
    return settings.model_copy(
        update={
            "oidc_issuer": provider.base,
            "oidc_audience": AUDIENCE,
            "oidc_jwks_url": f"{provider.base}/jwks.json",
            "oidc_page_client_id": CLIENT_ID,
        }
    )


# --- in the browser ---------------------------------------------------------------------------


async def poll(browser: DevTools, expression: str) -> Any:
    """A JS expression's value once it is truthy, across the navigations of a sign-in (an
    evaluation that meets a document being replaced is tried again)."""
    while True:
        try:
            value = await browser.js(expression)
        except AssertionError:
            value = None
        if value:
            return value
        await asyncio.sleep(0.05)


async def open_page(browser: DevTools, served: str, provider: Provider) -> None:
    provider.redirect_uris = {f"{served}/"}
    await browser.call("Page.navigate", url=f"{served}/")
    await browser.wait_for("Page.loadEventFired")
    assert await browser.js("document.getElementById('signIn').hidden") is False


async def sign_in(browser: DevTools) -> str:
    """Choose Sign in; the words the page shows once it is back from the provider."""
    await browser.js("document.getElementById('signIn').click()")
    words: str = await poll(
        browser,
        "location.search === '' && document.getElementById('loginStatus').textContent",
    )
    return words


async def stored_token(browser: DevTools) -> str | None:
    token: str | None = await browser.js("sessionStorage.getItem('pdfqueue-token')")
    return token


async def assert_no_violations(browser: DevTools, *refused: str) -> None:
    """No CSP violation, and no console error but the page's missing icon and the answers
    refused on purpose (Chromium logs a 4xx it fetched as an error)."""
    assert await browser.js("window.__violations") == []
    errors = [line for line in browser.console if "error" in line.lower()]
    expected = ("/favicon.ico", *refused)
    assert [e for e in errors if not e.rstrip().endswith(expected)] == []


@pytest.mark.timeout(120)
async def test_the_page_signs_in_and_works_as_the_tenant_of_the_claim(
    served: str, browser: DevTools, provider: Provider, make_corpus: MakeCorpus
) -> None:
    await open_page(browser, served, provider)
    assert await sign_in(browser) == "Signed in."
    token = await stored_token(browser)
    assert token is not None
    assert jwt.decode(token, options={"verify_signature": False})["tenant"] == TENANT
    assert await browser.js("location.href") == f"{served}/"  # no code or state left
    # PKCE as RFC 7636 has it: the verifier the page sent hashes to the challenge it showed
    [request] = provider.token_requests
    assert len(request["code_verifier"]) >= 43
    assert request["redirect_uri"] == f"{served}/"
    assert provider.refusals == []

    # uploads as that tenant: the batch is globex's, not acme's
    _, path = await make_corpus(3, seed=61)
    document = await browser.call("DOM.getDocument")
    node = await browser.call(
        "DOM.querySelector", nodeId=document["root"]["nodeId"], selector="#file"
    )
    await browser.call("DOM.setFileInputFiles", nodeId=node["nodeId"], files=[str(path)])
    await browser.js("document.getElementById('go').click()")
    batch_id = str(await poll(browser, "document.getElementById('batch').textContent"))
    assert await browser.js("document.getElementById('error').textContent") == ""
    async with httpx.AsyncClient(base_url=served) as http:
        assert (await http.get(f"/v1/batches/{batch_id}", headers=GLOBEX)).status_code == 200
        assert (await http.get(f"/v1/batches/{batch_id}", headers=ACME)).status_code == 404
        page = await http.get("/")
    # and lists as that tenant
    await browser.js("document.getElementById('back').click()")
    listed = await poll(
        browser,
        "[...document.querySelectorAll('#batches tbody tr')].map((r) => r.cells[0].textContent)",
    )
    assert listed[0] == path.name

    # the CSP lets the page reach the token endpoint's origin, and no other
    assert page.headers["Content-Security-Policy"] == PAGE_CSP.replace(
        "connect-src 'self'", f"connect-src 'self' {provider.base}"
    )
    await assert_no_violations(browser)


@pytest.mark.timeout(60)
async def test_an_answer_with_another_state_is_refused_before_any_request(
    served: str, browser: DevTools, provider: Provider
) -> None:
    provider.tamper_state = True
    await open_page(browser, served, provider)
    assert (await sign_in(browser)).startswith("Sign-in refused")
    assert await stored_token(browser) is None
    assert provider.token_requests == []  # the code was never even sent
    assert await browser.js("location.href") == f"{served}/"
    await assert_no_violations(browser)


@pytest.mark.timeout(90)
async def test_a_code_replayed_gets_no_token(
    served: str, browser: DevTools, provider: Provider
) -> None:
    """Once signed in: the provider's answer opened again (history, a link sent to the user)
    is refused by the page itself (its sign-in is over); a fresh sign-in that comes back with
    the used code is refused by the provider, and the page says so."""
    await open_page(browser, served, provider)
    assert await sign_in(browser) == "Signed in."
    [first_answer] = provider.callbacks
    await browser.call("Page.navigate", url=first_answer)
    await browser.wait_for("Page.loadEventFired")
    words = await poll(browser, "document.getElementById('loginStatus').textContent")
    assert words.startswith("Sign-in refused")
    assert len(provider.token_requests) == 1

    # signed out (the tab's token and its field emptied): the next sign-in stands alone
    await browser.js("sessionStorage.clear(); document.getElementById('token').value = ''")
    await open_page(browser, served, provider)
    provider.replay_code = parse_qs(urlsplit(first_answer).query)["code"][0]
    assert (await sign_in(browser)).startswith("Sign-in failed")
    assert len(provider.token_requests) == 2
    assert provider.refusals == ["unknown or used code"]
    assert await stored_token(browser) is None
    await assert_no_violations(browser, "/token")


@pytest.mark.timeout(60)
async def test_a_verifier_that_does_not_match_gets_no_token(
    served: str, browser: DevTools, provider: Provider
) -> None:
    """The code was issued for another challenge (an attacker's code slipped into the page's
    answer): the page's verifier does not match it, the provider refuses, the page says so."""
    provider.foreign_challenge = True
    await open_page(browser, served, provider)
    words = await sign_in(browser)
    assert words.startswith("Sign-in failed: the identity provider refused (invalid_grant)")
    assert provider.refusals == ["code_verifier does not match the challenge"]
    assert await stored_token(browser) is None
    await assert_no_violations(browser, "/token")


@pytest.mark.timeout(60)
async def test_an_expired_token_signs_out_without_a_loop(
    served: str, browser: DevTools, provider: Provider
) -> None:
    now = int(time.time())
    provider.token_claims = {"exp": now - 3600, "iat": now - 7200}
    await open_page(browser, served, provider)
    await browser.js("document.getElementById('signIn').click()")
    words = await poll(browser, "document.getElementById('error').textContent")
    assert words.startswith("Signed out: your sign-in has ended")
    assert await browser.js("document.getElementById('loginStatus').textContent") == words
    shown = "['noToken', 'noTokenLogin'].map((id) => document.getElementById(id).hidden)"
    assert await browser.js(shown) == [False, False]  # what a token is, and to sign in
    assert await stored_token(browser) is None
    await asyncio.sleep(1.0)
    assert len(provider.callbacks) == 1  # the page did not go back to the provider
    assert await browser.js("location.href") == f"{served}/"
    await assert_no_violations(browser, "/v1/batches?limit=20")


@pytest.mark.timeout(60)
async def test_sign_out_forgets_the_token_signed_in_or_pasted(
    served: str, browser: DevTools, provider: Provider
) -> None:
    await open_page(browser, served, provider)
    assert await browser.js("document.getElementById('signOut').hidden") is True  # no token yet
    assert await sign_in(browser) == "Signed in."
    for source in ("signed in", "pasted"):
        assert await browser.js("document.getElementById('signOut').hidden") is False, source
        await browser.js("document.getElementById('signOut').click()")
        assert await stored_token(browser) is None, source
        assert await browser.js("document.getElementById('token').value") == ""
        status = await browser.js("document.getElementById('loginStatus').textContent")
        assert status == "Signed out: the token is forgotten in this tab."
        shown = "['noToken', 'signOut'].map((id) => document.getElementById(id).hidden)"
        assert await browser.js(shown) == [False, True]  # what a token is; nothing to forget
        # then a token pasted by hand, forgotten the same way
        await browser.js(f"document.getElementById('token').value = {json.dumps(GLOBEX_TOKEN)}")
        await browser.js("document.getElementById('tokenForm').requestSubmit()")
        assert await stored_token(browser) == GLOBEX_TOKEN
    await browser.js("document.getElementById('signOut').click()")
    assert await stored_token(browser) is None
    assert len(provider.callbacks) == 1  # signing out never went to the provider
    await assert_no_violations(browser)


# --- what the API offers the page ---------------------------------------------------------------


class _Body(HTMLParser):
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.attrs = dict(attrs)


def _login_data(page: str) -> Any:
    parser = _Body()
    parser.feed(page)
    data = parser.attrs["data-login"]
    return json.loads(data) if data else None


async def test_the_api_offers_the_discovered_endpoints_and_keeps_them(
    settings: Settings, provider: Provider
) -> None:
    async with serve(settings) as client:
        first = await client.get("/")
        again = await client.get("/batches/" + "0" * 32)
    assert _login_data(first.text) == {
        "authorize": f"{provider.base}/authorize",
        "token": f"{provider.base}/token",
        "client": CLIENT_ID,
        "scopes": "openid",
    }
    assert _login_data(again.text) == _login_data(first.text)
    assert provider.discoveries == 1  # fetched once, then kept
    connect = [d for d in first.headers["Content-Security-Policy"].split("; ") if "connect" in d]
    assert connect == [f"connect-src 'self' {provider.base}"]


REFUSED = {
    "another issuer": ({"issuer": "https://login.example.test/"}, "names the issuer"),
    "a token endpoint over http, not loopback": (
        {"token_endpoint": "http://login.example.test/token"},
        "token_endpoint 'http://login.example.test/token' is neither https nor on a loopback",
    ),
    "an authorization endpoint over http, not loopback": (
        {"authorization_endpoint": "http://10.0.0.1/authorize"},
        "neither https nor on a loopback",
    ),
    "no S256": ({"code_challenge_methods_supported": ["plain"]}, "not S256"),
    "credentials in the token endpoint": (
        {"token_endpoint": "https://user:pw@login.example.test/token"},
        "has credentials",
    ),
    "a CSP directive smuggled in the host": (
        {"token_endpoint": "https://a.test;script-src *.test/token"},
        "unusual host",
    ),
    "no token endpoint": ({"token_endpoint": None}, "token_endpoint is missing"),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_document_it_cannot_trust_gets_no_sign_in_and_a_reason_in_the_log(
    case: str, settings: Settings, provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    changes, reason = REFUSED[case]
    provider.discovery = changes
    with caplog.at_level(logging.WARNING, logger="pdfqueue_api.page_login"):
        async with serve(settings) as client:
            page = await client.get("/")
    assert page.status_code == 200
    assert _login_data(page.text) is None
    assert page.headers["Content-Security-Policy"] == PAGE_CSP
    assert [r.getMessage() for r in caplog.records if reason in r.getMessage()], caplog.text
    assert provider.discoveries == 1


def test_the_page_client_needs_an_issuer_and_plain_scopes() -> None:
    with pytest.raises(ValueError, match="PAGE_CLIENT_ID needs PDFQUEUE_OIDC_ISSUER"):
        Settings(oidc_page_client_id=CLIENT_ID, api_tokens="acme:" + "a" * 40)
    with pytest.raises(ValueError, match="PDFQUEUE_OIDC_PAGE_SCOPES"):
        Settings(oidc_page_scopes='openid "x"', api_tokens="acme:" + "a" * 40)


def test_endpoints_are_https_or_loopback_and_their_origin_is_exact() -> None:
    for url in ("https://login.example.test/t", "http://127.0.0.1:8080/t", "http://[::1]/t"):
        assert checked_url(url, "token_endpoint") == url
    assert checked_url("http://localhost:9/t", "token_endpoint")
    assert origin("https://Login.Example.test:8443/realms/hr/token?x=1") == (
        "https://login.example.test:8443"
    )
    for url in ("http://127.0.0.1.example.test/t", "ftp://127.0.0.1/t", "https:///t", "//x/t"):
        with pytest.raises(DiscoveryRefused):
            checked_url(url, "token_endpoint")
