"""The API fails closed (issue 10, items 5-7): no open start, no echoed tokens, no leaks."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic import ValidationError

from pdfqueue.domain import tenants
from pdfqueue.domain.errors import ConfigurationError
from pdfqueue.domain.settings import Settings
from tests.support.helpers import ACME, GLOBEX, MakeCorpus, upload

SECRET = "Zq7-leaked-if-you-see-me-9f8e7d6c5b4a"
"""A marker inside every bad token value: it must never reach a message, traceback or log."""


@asynccontextmanager
async def serve(settings: Settings, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    """The real ASGI app with its lifespan, as the `api` fixture builds it."""
    from pdfqueue_api.app import create_app

    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t", headers=headers
        ) as client,
    ):
        yield client


def api_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`pdfqueue api` as a real process on a port nobody listens on; it must not get that far."""
    return subprocess.run(
        [sys.executable, "-m", "pdfqueue.cli.main", "api", "--port", "9"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def clean_env(**variables: str) -> dict[str, str]:
    """This process's environment without any token setting (PDFQUEUE_API_TOKENS[_FILE])."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDFQUEUE_API_TOKENS")}
    env.pop("PDFQUEUE_ALLOW_ANONYMOUS", None)
    return {**env, **variables}


# --- item 5: no tokens, no API -----------------------------------------------------------------


@pytest.mark.parametrize("tokens", ["", "   ", " , ,"])
def test_no_tokens_refuses_to_start(settings: Settings, tokens: str) -> None:
    """Empty and whitespace values used to open the API to everyone as tenant `public`."""
    from pdfqueue_api.app import create_app

    empty = Settings(
        **{**settings.model_dump(exclude={"api_tokens", "pod_name"}), "api_tokens": tokens}
    )
    assert empty.api_tokens == {}
    with pytest.raises(ConfigurationError, match="PDFQUEUE_API_TOKENS is empty"):
        create_app(empty)


def test_pdfqueue_api_exits_without_tokens() -> None:
    result = api_process(clean_env(PDFQUEUE_API_TOKENS=" "))
    assert result.returncode == 2, result.stderr
    assert "refusing to start" in result.stderr
    assert "PDFQUEUE_ALLOW_ANONYMOUS" in result.stderr
    assert "Uvicorn running" not in result.stderr + result.stdout


async def test_anonymous_only_when_asked_for(
    settings: Settings, make_corpus: MakeCorpus, db: asyncpg.Connection
) -> None:
    from pdfqueue_api.app import create_app

    base = settings.model_dump(exclude={"api_tokens", "pod_name"})
    both = Settings(**{**base, "api_tokens": "acme:" + "a" * 32, "allow_anonymous": True})
    with pytest.raises(ConfigurationError, match="choose one"):
        create_app(both)

    _, path = await make_corpus(2, seed=5)
    anonymous = Settings(**{**base, "api_tokens": "", "allow_anonymous": True})
    async with serve(anonymous) as client:  # asked for: open, as the one tenant `public`
        batch_id = await upload(client, path)
    tenant = await db.fetchval("SELECT tenant FROM pdfqueue_batches WHERE id = $1", batch_id)
    assert tenant == "public"


# --- item 6: token parsing ------------------------------------------------------------------

BAD_TOKENS = [
    ("no-colon-" + SECRET, "entry 1 is not tenant:token"),
    ("acme:short-" + SECRET[:8], "entry 1: a plain token must be 32"),
    ("acme:" + "a" * 40 + f",globex:sha256:{SECRET}", "entry 2: a hash must be sha256: + 64"),
    (f"acme:sha256:{'A' * 64}", "entry 1: a hash must be sha256: + 64 lowercase hex"),
    (f"acme:sha256:{'a' * 63}", "entry 1: a hash must be sha256: + 64 lowercase hex"),
    (f"acme:{SECRET} with space", "entry 1: a plain token must be"),
    (f"{SECRET}/x:{SECRET}{SECRET}", "entry 1: a tenant is"),
    (f"acme:{SECRET},globex:{SECRET}", "entry 2 (tenant globex) repeats the token of tenant acme"),
    (
        f"acme:{SECRET},globex:sha256:{hashlib.sha256(SECRET.encode()).hexdigest()}",
        "entry 2 (tenant globex) repeats the token of tenant acme",
    ),
    (f"sha256:{hashlib.sha256(SECRET.encode()).hexdigest()}", "is not tenant:token"),
]


@pytest.mark.parametrize(("value", "message"), BAD_TOKENS)
def test_bad_tokens_refused_without_echo(
    value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PDFQUEUE_API_TOKENS", value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    text = str(caught.value) + repr(caught.value)
    text += "".join(traceback.format_exception(caught.value))
    assert message in str(caught.value)
    for secret in (SECRET, SECRET[:8], hashlib.sha256(SECRET.encode()).hexdigest()[:8], value):
        assert secret not in text


def test_pdfqueue_api_prints_no_token() -> None:
    """The process's whole output (its log and its error) holds no part of any token."""
    value = f"acme:{SECRET},globex:{SECRET}"
    result = api_process(clean_env(PDFQUEUE_API_TOKENS=value))
    assert result.returncode == 2
    assert "repeats the token of tenant acme" in result.stderr
    assert SECRET[:6] not in result.stderr + result.stdout


def test_valid_tokens_parse() -> None:
    plain, hashed = "p" * 32, hashlib.sha256(b"q" * 40).hexdigest()
    tokens = Settings(api_tokens=f" acme:{plain} , globex:sha256:{hashed} ,").api_tokens
    assert tokens == {plain: "acme", f"sha256:{hashed}": "globex"}
    with pytest.raises(ValidationError, match="plain token must be 32"):
        Settings(api_tokens="acme:" + "p" * 31)


def test_tokens_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PDFQUEUE_API_TOKENS_FILE: one entry a line (a mounted Secret), the same rules."""
    plain, hashed = "f" * 32, hashlib.sha256(b"g" * 40).hexdigest()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"acme:{plain}\nglobex:sha256:{hashed}\n")
    monkeypatch.setenv("PDFQUEUE_API_TOKENS_FILE", str(tokens))
    assert Settings().api_tokens == {plain: "acme", f"sha256:{hashed}": "globex"}

    tokens.write_text(f"acme:{SECRET}\nglobex:{SECRET}\n")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert "entry 2 (tenant globex) repeats the token of tenant acme" in str(caught.value)
    assert SECRET not in "".join(traceback.format_exception(caught.value))

    monkeypatch.setenv("PDFQUEUE_API_TOKENS", f"acme:{plain}")
    with pytest.raises(ValidationError, match="both set: choose one"):
        Settings()
    monkeypatch.delenv("PDFQUEUE_API_TOKENS")
    monkeypatch.setenv("PDFQUEUE_API_TOKENS_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValidationError, match="cannot be read: FileNotFoundError"):
        Settings()


async def test_a_rotated_tokens_file_is_read_again_without_a_restart(
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Secret mounted as PDFQUEUE_API_TOKENS_FILE is rotated the kubelet's way (a new
    folder, the `..data` symlink swapped): the API takes the new tokens and drops the old
    ones without a restart; a replacement that does not parse is refused, the tokens read
    last stay, and the log names the entry, never a token."""
    monkeypatch.setattr(tenants, "RECHECK_S", 0.0)  # every request looks at the file
    old, new = "o" * 40, "n" * 40
    secret = tmp_path / "secret"
    secret.mkdir()

    def publish(text: str, version: int) -> None:
        folder = secret / f"..{version}"
        folder.mkdir()
        (folder / "api-tokens").write_text(text)
        swap = secret / "..data_tmp"
        swap.symlink_to(folder.name)
        swap.replace(secret / "..data")

    publish(f"acme:{old}\n", 1)
    (secret / "api-tokens").symlink_to("..data/api-tokens")
    path = str(secret / "api-tokens")
    rotating = settings.model_copy(
        update={"api_tokens_file": path, "api_tokens": tenants.tokens_from_file(path)}
    )
    caplog.set_level(logging.WARNING, logger="pdfqueue.domain.tenants")

    async def status(token: str) -> int:
        answer = await client.get("/v1/batches", headers={"Authorization": f"Bearer {token}"})
        return answer.status_code

    async with serve(rotating) as client:
        assert (await status(old), await status(new)) == (200, 401)
        publish(f"acme:{new}\n", 2)
        assert (await status(old), await status(new)) == (401, 200)
        publish(f"acme:{SECRET}\nglobex:{SECRET}\n", 3)  # one token for two tenants
        assert (await status(old), await status(new), await status(SECRET)) == (401, 200, 401)
    assert "entry 2 (tenant globex) repeats the token of tenant acme" in caplog.text
    assert SECRET not in caplog.text


async def test_fixture_tokens_reach_their_tenants(api: httpx.AsyncClient) -> None:
    """The suite's own tokens are valid ones: acme's in clear, globex's as a hash."""
    missing = "/v1/batches/0123456789abcdef0123456789abcdef"
    assert (await api.get(missing, headers=ACME)).status_code == 404
    assert (await api.get(missing, headers=GLOBEX)).status_code == 404
    bad = {"Authorization": "Bearer " + "x" * 40}
    assert (await api.get(missing, headers=bad)).status_code == 401


# --- item 7: readiness, docs, headers -------------------------------------------------------


async def test_readyz_says_only_ok_or_error(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    down = settings.model_copy(update={"redis_url": f"redis://:{SECRET}@127.0.0.1:9/0"})
    caplog.set_level(logging.WARNING, logger="pdfqueue_api.routes.health")
    async with serve(down) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json() == {"redis": "error", "postgresql": "ok", "storage": "ok", "schema": "ok"}
    assert "readiness: redis failed" in caplog.text  # the why is in the log, for operators
    assert SECRET not in caplog.text


async def test_no_remote_docs_but_openapi(api: httpx.AsyncClient) -> None:
    assert (await api.get("/docs")).status_code == 404
    assert (await api.get("/redoc")).status_code == 404
    assert (await api.get("/docs/oauth2-redirect")).status_code == 404
    spec = await api.get("/openapi.json")
    assert spec.status_code == 200
    assert spec.json()["info"]["title"] == "pdfqueue"


class _Inline(HTMLParser):
    """Collects what a strict CSP would block: inline script/style, handlers, remote assets."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.assets: list[str] = []
        self._tag = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        attributes = dict(attrs)
        self.found += [f"{tag} {name}" for name in attributes if name.startswith("on")]
        if "style" in attributes or tag == "style":
            self.found.append(f"{tag} style")
        for name in ("src", "href"):
            if tag in {"script", "link"} and attributes.get(name):
                self.assets.append(str(attributes[name]))

    def handle_data(self, data: str) -> None:
        if self._tag == "script" and data.strip():
            self.found.append("inline script")

    def handle_endtag(self, tag: str) -> None:
        self._tag = ""


async def test_page_works_under_its_csp(api: httpx.AsyncClient) -> None:
    page = await api.get("/", headers={"Authorization": ""})
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in csp.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["base-uri"] == "'none'"
    assert directives["form-action"] == "'self'"
    assert "unsafe" not in csp
    parser = _Inline()
    parser.feed(page.text)
    assert parser.found == []
    assert sorted(parser.assets) == ["static/page.css", "static/page.js"]
    for asset, kind in (("static/page.css", "text/css"), ("static/page.js", "text/javascript")):
        served = await api.get(f"/{asset}", headers={"Authorization": ""})
        assert served.status_code == 200
        assert served.headers["content-type"].startswith(kind)
        assert served.headers["x-content-type-options"] == "nosniff"
        assert len(served.content) > 200
    assert (await api.get("/static/../page.html")).status_code == 404
    assert (await api.get("/static/page.html")).status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "auth", "status"),
    [
        ("GET", "/", False, 200),
        ("GET", "/healthz", False, 200),
        ("GET", "/readyz", False, 200),
        ("GET", "/openapi.json", False, 200),
        ("GET", "/metrics", False, 200),
        ("GET", "/v1/batches/0123456789abcdef0123456789abcdef", False, 401),
        ("GET", "/v1/batches/0123456789abcdef0123456789abcdef", True, 404),
        ("GET", "/v1/batches/0123456789abcdef0123456789abcdef/files?format=csv", True, 404),
        ("POST", "/v1/batches", True, 415),
        ("GET", "/no/such/route", False, 404),
    ],
)
async def test_security_headers_on_every_response(
    api: httpx.AsyncClient, method: str, path: str, auth: bool, status: int
) -> None:
    headers: dict[str, Any] = {} if auth else {"Authorization": ""}
    response = await api.request(method, path, headers=headers)
    assert response.status_code == status
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    if path != "/":
        assert response.headers["content-security-policy"].startswith("default-src 'none'")


# --- found by schemathesis ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"--b0und4ry\r\nNone--b0und4ry--\r\n",  # schemathesis' example: a header line without ':'
        b'--b0und4ry\r\nContent-Disposition: form-data; name="file"\r\n\r\nPK\x03\x04' * 2,
        b"garbage before any boundary",
    ],
)
async def test_malformed_multipart_is_422_and_leaves_nothing(
    api: httpx.AsyncClient, s3_keys: Any, body: bytes
) -> None:
    """A body python-multipart cannot parse was a 500; it is bad input, and nothing is kept."""
    response = await api.post(
        "/v1/batches",
        content=body,
        headers={"Content-Type": "multipart/form-data; boundary=b0und4ry"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("the upload is not a ZIP archive")
    assert s3_keys() == []
