"""OpenID Connect access tokens as a way in, beside the static tokens: a signed JWT of the
configured issuer, for the API's audience, names its caller's tenant in a claim.

PyJWT verifies (a maintained JOSE library: signature, `exp`, `nbf`, `iss`, `aud`), and its
`PyJWKClient` fetches the issuer's keys, keeps them (five minutes), and fetches again when a
token names a key it does not know (the issuer rotated its keys), at most once per 30 s
(`REFETCH_COOLDOWN_S`).
Only public-key algorithms are accepted (`PDFQUEUE_OIDC_ALGORITHMS`), so neither `alg: none`
nor a public key used as an HMAC secret passes.
"""

from __future__ import annotations

import logging

import jwt

from pdfqueue.domain.settings import AuthSettings
from pdfqueue.domain.tenants import valid_tenant

log = logging.getLogger(__name__)
JWKS_TIMEOUT_S = 5.0
REFETCH_COOLDOWN_S = 30.0
"""After a fetch of the keys, a token naming an unknown key fetches them again only this much
later: a flood of made-up key ids costs the issuer one request per 30 s. Issuers publish a
new key before they sign with it, so a rotation meets keys already fetched."""
LEEWAY_S = 30
"""Clock skew allowed between the issuer and this host, on `exp`, `nbf` and `iat`."""


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: a JWS in compact form (a static token never has dots)."""
    return token.count(".") == 2


class OidcTokens:
    """The issuer's access tokens, verified against its published keys."""

    def __init__(self, settings: AuthSettings) -> None:
        if not (settings.oidc_issuer and settings.oidc_audience and settings.oidc_jwks_url):
            msg = "OIDC needs an issuer, an audience and a JWKS URL"
            raise ValueError(msg)
        self.issuer = settings.oidc_issuer
        self.audience = settings.oidc_audience
        self.claim = settings.oidc_tenant_claim
        self.algorithms = sorted(settings.oidc_algorithms)
        self.keys = jwt.PyJWKClient(
            settings.oidc_jwks_url,
            cache_jwk_set=True,
            lifespan=300,
            timeout=JWKS_TIMEOUT_S,
            cooldown_duration=REFETCH_COOLDOWN_S,
        )

    def tenant(self, token: str) -> str | None:
        """The tenant a valid access token names; None for any token that is not one (the
        reason goes to the log, at debug level for the ordinary ones: a client's expired
        token is no event)."""
        try:
            key = self.keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            log.warning("OIDC: the issuer's keys cannot be fetched: %s", exc)
            return None
        except jwt.PyJWTError as exc:
            log.debug("OIDC: token refused: %s", type(exc).__name__)
            return None
        tenant = claims.get(self.claim)
        if isinstance(tenant, str) and valid_tenant(tenant):
            return tenant
        log.info("OIDC: a valid token without a tenant in its %r claim was refused", self.claim)
        return None
