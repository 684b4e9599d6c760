"""Who may call the API: the tenants' tokens, anonymous access, trusted tenants."""

from __future__ import annotations

import re
from typing import Annotated, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from pdfqueue.domain.errors import ConfigurationError
from pdfqueue.domain.settings.values import entries
from pdfqueue.domain.tenants import parse_api_tokens, tokens_from_file

PUBLIC_KEY_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""The signature algorithms an OIDC access token may use."""
SCOPES = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*")
"""Space-separated scope tokens (RFC 6749, 3.3)."""


class AuthSettings(BaseModel):
    """Authentication: the tenants' tokens, and what a tenant is shown.

    Who may call the API, as which tenant (`pdfqueue.domain.tenants` checks the tokens).
    """

    api_tokens: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """`tenant:token` pairs, comma separated; `tenant:sha256:<hex>` stores only the hash. A plain
    token has 32 to 1024 visible ASCII characters, a hash is 64 lowercase hex digits, and no
    token may belong to two tenants. Errors name the entry by position, never its text."""
    api_tokens_file: str | None = None
    """A file holding what PDFQUEUE_API_TOKENS would (a mounted Secret, say), so the tokens
    stay out of the environment that child processes inherit. Setting both is refused. The
    API reads it again when it is replaced (a Secret's rotation, within a second; no
    restart); a replacement that does not parse is refused in the log and the tokens stay."""
    allow_anonymous: bool = False
    """Let the API start without tokens, every caller then being the one tenant `public`.
    Without it, an API with no tokens refuses to start."""
    oidc_issuer: str | None = None
    """An OpenID Connect issuer (its `iss`, e.g. `https://login.example.com/realms/hr`) whose
    signed access tokens the API accepts beside the static tokens, with `oidc_audience` and
    `oidc_jwks_url`; the tenant is the token's `oidc_tenant_claim`."""
    oidc_audience: str | None = None
    """The `aud` an access token must name (the API's client id or resource at the issuer)."""
    oidc_jwks_url: str | None = None
    """Where the issuer publishes its signing keys (its discovery document's `jwks_uri`),
    fetched when a token names a key not yet known (a rotation) and kept five minutes."""
    oidc_tenant_claim: str = "tenant"
    """The access token's claim that names the caller's tenant (a tenant name, as a static
    token's); a token without it is refused."""
    oidc_algorithms: Annotated[frozenset[str], NoDecode] = frozenset({"RS256", "ES256"})
    """Signature algorithms accepted, comma separated: public-key ones only (`none` and the
    HMAC `HS*` family are refused here, so a public key can never serve as a shared secret)."""
    oidc_page_client_id: str | None = None
    """The page's own client id at the issuer (a public client: no secret, as nothing in a
    browser stays secret): set, the page offers "Sign in" beside the token field, the OAuth
    authorization code flow with PKCE (S256) at the endpoints of the issuer's discovery
    document. Register the page's URL (the API's `/`) as the client's redirect URI and its
    origin as a web origin (CORS, for the token request)."""
    oidc_page_scopes: str = "openid"
    """The scopes the page's sign-in asks for, space separated (add the one, if any, that puts
    `oidc_audience` and the tenant claim in the access token)."""
    kubernetes_tokens: bool = False
    """Also accept the cluster's ServiceAccount tokens, as the API server reviews them
    (TokenReview, for the audience `kubernetes_token_audience`): the tenant is the one
    PDFQUEUE_OPERATOR_NAMESPACE_TENANTS names for the account's namespace (`ns:tenant`; a
    namespace not named, or named `*`, gets none)."""
    kubernetes_token_audience: str = "pdfqueue"  # noqa: S105 (an audience, not a secret)
    """The audience a ServiceAccount token must be for (a projected token's `audience`), so a
    token meant for the API server, or any other service, is no token here."""
    trusted_tenants: Annotated[frozenset[str], NoDecode] = frozenset()
    """Tenants, comma separated, whose per-file report shows `user_id` and `object_key`;
    for every other tenant both are null (they name users of the host application)."""

    @model_validator(mode="before")
    @classmethod
    def _read_tokens_file(cls, data: object) -> object:
        if not isinstance(data, dict) or not data.get("api_tokens_file"):
            return data
        if data.get("api_tokens"):
            msg = "PDFQUEUE_API_TOKENS and PDFQUEUE_API_TOKENS_FILE are both set: choose one"
            raise ValueError(msg)
        return {**data, "api_tokens": tokens_from_file(data["api_tokens_file"])}

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return parse_api_tokens(entries(value))

    @field_validator("oidc_algorithms", mode="before")
    @classmethod
    def _parse_algorithms(cls, value: object) -> object:
        found = frozenset(entries(value)) if isinstance(value, str) else value
        bad = sorted(set(found) - PUBLIC_KEY_ALGORITHMS) if isinstance(found, frozenset) else []
        if bad:
            allowed = ", ".join(sorted(PUBLIC_KEY_ALGORITHMS))
            msg = f"PDFQUEUE_OIDC_ALGORITHMS: {', '.join(bad)} not accepted (only {allowed})"
            raise ValueError(msg)
        return found

    @model_validator(mode="after")
    def _check_oidc(self) -> Self:
        given = (self.oidc_issuer, self.oidc_audience, self.oidc_jwks_url)
        if any(given) and not all(given):
            msg = "PDFQUEUE_OIDC_ISSUER, _AUDIENCE and _JWKS_URL go together: set all three"
            raise ValueError(msg)
        if self.oidc_page_client_id and not self.oidc_issuer:
            msg = (
                "PDFQUEUE_OIDC_PAGE_CLIENT_ID needs PDFQUEUE_OIDC_ISSUER (the page signs in there)"
            )
            raise ValueError(msg)
        return self

    @field_validator("oidc_page_scopes")
    @classmethod
    def _check_scopes(cls, value: str) -> str:
        """Scope tokens as RFC 6749 (3.3) has them: visible ASCII but `"` and `\\`."""
        if not SCOPES.fullmatch(value):
            msg = "PDFQUEUE_OIDC_PAGE_SCOPES: scopes separated by single spaces, each visible ASCII"
            raise ValueError(msg)
        return value

    @field_validator("trusted_tenants", mode="before")
    @classmethod
    def _parse_trusted(cls, value: object) -> object:
        """A comma-separated set."""
        return frozenset(entries(value)) if isinstance(value, str) else value

    def check_api_auth(self) -> None:
        """Fail closed: an API without tokens runs only when anonymous access is asked for."""
        other_ways = self.oidc_issuer or self.kubernetes_tokens
        if not self.api_tokens and not self.allow_anonymous and not other_ways:
            msg = (
                "PDFQUEUE_API_TOKENS is empty: the API refuses to start without tokens "
                "(set PDFQUEUE_ALLOW_ANONYMOUS=true to run it open, for local use only)"
            )
            raise ConfigurationError(msg)
        if (self.api_tokens or other_ways) and self.allow_anonymous:
            msg = "PDFQUEUE_ALLOW_ANONYMOUS=true and PDFQUEUE_API_TOKENS are both set: choose one"
            raise ConfigurationError(msg)
