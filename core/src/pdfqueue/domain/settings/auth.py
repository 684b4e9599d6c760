"""Who may call the API: the tenants' tokens, anonymous access, trusted tenants."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from pdfqueue.domain.errors import ConfigurationError
from pdfqueue.domain.settings.values import entries
from pdfqueue.domain.tenants import parse_api_tokens, tokens_from_file


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

    @field_validator("trusted_tenants", mode="before")
    @classmethod
    def _parse_trusted(cls, value: object) -> object:
        """A comma-separated set."""
        return frozenset(entries(value)) if isinstance(value, str) else value

    def check_api_auth(self) -> None:
        """Fail closed: an API without tokens runs only when anonymous access is asked for."""
        if not self.api_tokens and not self.allow_anonymous:
            msg = (
                "PDFQUEUE_API_TOKENS is empty: the API refuses to start without tokens "
                "(set PDFQUEUE_ALLOW_ANONYMOUS=true to run it open, for local use only)"
            )
            raise ConfigurationError(msg)
        if self.api_tokens and self.allow_anonymous:
            msg = "PDFQUEUE_ALLOW_ANONYMOUS=true and PDFQUEUE_API_TOKENS are both set: choose one"
            raise ConfigurationError(msg)
