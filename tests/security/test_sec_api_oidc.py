"""OpenID Connect access tokens on the real API: a local JWKS endpoint with keys made here
stands for the issuer (Keycloak, Entra ID, Okta and Cognito publish theirs the same way). A
valid token names its tenant in a claim; every other one is refused with 401, as an unknown
static token is: expired, for another audience or issuer, `alg: none`, an HMAC signed with
the public key, a key the issuer rotated out, no tenant claim. Static tokens keep working."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from pdfqueue.domain.settings import Settings
from pdfqueue_api import oidc
from tests.security.test_sec_api import serve
from tests.support.helpers import ACME
from tests.support.servers import json_server

ISSUER = "https://login.example.test/realms/hr"
AUDIENCE = "pdfqueue-api"


class Issuer:
    """The keys an issuer signs with, and the JWKS document it publishes (swappable)."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {
            "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec-1": ec.generate_private_key(ec.SECP256R1()),
            "rsa-2": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        }
        self.published = ["rsa-1", "ec-1"]
        self.fetches = 0

    def jwks(self) -> bytes:
        self.fetches += 1
        keys = []
        for kid in self.published:
            jwk = json.loads(
                jwt.algorithms.get_default_algorithms()[
                    "RS256" if kid.startswith("rsa") else "ES256"
                ].to_jwk(self.keys[kid].public_key())
            )
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return json.dumps({"keys": keys}).encode()

    def token(self, kid: str = "rsa-1", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "iat": now, "sub": "u1"}
        body |= {"tenant": "acme"} | claims
        body = {k: v for k, v in body.items() if v is not None}
        algorithm = "RS256" if kid.startswith("rsa") else "ES256"
        return jwt.encode(body, self.keys[kid], algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[tuple[Issuer, str]]:
    keys = Issuer()
    with json_server(lambda _path, _headers: (200, keys.jwks())) as url:
        yield keys, f"{url}/jwks.json"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _oidc(settings: Settings, jwks_url: str) -> Settings:
    return settings.model_copy(
        update={"oidc_issuer": ISSUER, "oidc_audience": AUDIENCE, "oidc_jwks_url": jwks_url}
    )


async def _status(client: httpx.AsyncClient, token: str) -> int:
    answer = await client.get("/v1/batches", headers={"Authorization": f"Bearer {token}"})
    return answer.status_code


async def test_an_issuers_access_token_names_its_tenant(
    settings: Settings, issuer: tuple[Issuer, str]
) -> None:
    keys, url = issuer
    async with serve(_oidc(settings, url)) as client:
        assert await _status(client, keys.token()) == 200
        assert await _status(client, keys.token("ec-1")) == 200
        answer = await client.get("/v1/batches", headers=ACME)  # a static token still works
        assert answer.status_code == 200
        assert keys.fetches == 1  # the keys are kept, not fetched per request


async def test_every_other_token_is_refused_with_401(
    settings: Settings, issuer: tuple[Issuer, str]
) -> None:
    keys, url = issuer
    now = int(time.time())
    header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "exp": now + 300, "tenant": "acme"}
    unsigned = f"{header}.{_b64(json.dumps(claims).encode())}."
    public_pem = (
        keys.keys["rsa-1"]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    # HS256 keyed with the public key: the classic algorithm confusion
    confused = _hmac_token(claims, public_pem)
    refused = {
        "expired": keys.token(exp=now - 3600, iat=now - 7200),
        "another audience": keys.token(aud="another-api"),
        "another issuer": keys.token(iss="https://evil.example.test/"),
        "alg none": unsigned,
        "HMAC with the public key": confused,
        "a key never published": keys.token("rsa-2"),
        "no tenant claim": keys.token(tenant=None),
        "a tenant no tenant can be": keys.token(tenant="../acme"),
        "no expiry": keys.token(exp=None),
        "garbage": "a.b.c",
    }
    async with serve(_oidc(settings, url)) as client:
        answers = {name: await _status(client, token) for name, token in refused.items()}
    assert answers == dict.fromkeys(refused, 401)


def _hmac_token(claims: dict[str, Any], secret: bytes) -> str:
    import hashlib
    import hmac

    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(mac)}"


async def test_a_rotated_key_is_fetched_and_a_retired_one_refused(
    settings: Settings, issuer: tuple[Issuer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issuer rotates: it publishes a new key and retires the old. A token of the new key
    makes the API fetch the keys again (here at once; by default 30 s after the last fetch at
    the earliest); a token of the retired one is refused from then on."""
    monkeypatch.setattr(oidc, "REFETCH_COOLDOWN_S", 0.0)
    keys, url = issuer
    async with serve(_oidc(settings, url)) as client:
        old = keys.token("rsa-1")
        assert await _status(client, old) == 200
        keys.published = ["rsa-2"]
        assert await _status(client, keys.token("rsa-2")) == 200
        assert keys.fetches == 2
        # the old token is still within its expiry: only the keys say no
        assert await _status(client, old) == 401


def test_oidc_settings_go_together_and_refuse_symmetric_algorithms() -> None:
    with pytest.raises(ValueError, match="go together"):
        Settings(oidc_issuer=ISSUER, api_tokens="acme:" + "a" * 40)
    with pytest.raises(ValueError, match="HS256, none not accepted"):
        Settings(oidc_algorithms="RS256,HS256,none")
    only_oidc = Settings(oidc_issuer=ISSUER, oidc_audience=AUDIENCE, oidc_jwks_url="https://x/j")
    only_oidc.check_api_auth()  # no static token, yet the API has a way in
