"""Tenants: the names one may have, and the bearer tokens that name one.

A token is stored plain or as `sha256:<hex>` of it (PDFQUEUE_API_TOKENS); either way a token
is compared by one rule, in constant time (`tenant_for`). Tokens kept in a file
(PDFQUEUE_API_TOKENS_FILE, a mounted Secret) are read again when the file is replaced
(`TokenFile`): a rotation needs no restart."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
"""A tenant the operator accepts: it becomes a folder name under the source prefix."""
_TENANT = re.compile(TENANT_PATTERN)


def valid_tenant(name: str) -> bool:
    """Whether `name` can be a tenant the operator files batches under (TENANT_PATTERN)."""
    return _TENANT.fullmatch(name) is not None


_PLAIN_TOKEN = re.compile(r"^[\x21-\x7e]{32,1024}$")
_HASHED_TOKEN = re.compile(r"^sha256:[0-9a-f]{64}$")
MIN_TOKEN_CHARS = 32
"""Shortest plain token: 32 random characters are out of reach of guessing."""


def token_problem(token: str) -> str | None:
    """What is wrong with one stored token (plain or `sha256:<hex>`), in words without it."""
    if token.startswith("sha256:"):
        return None if _HASHED_TOKEN.match(token) else "a hash must be sha256: + 64 lowercase hex"
    if _PLAIN_TOKEN.match(token):
        return None
    return f"a plain token must be {MIN_TOKEN_CHARS} to 1024 visible ASCII characters"


def parse_api_tokens(entries: Iterable[str]) -> dict[str, str]:
    """`tenant:token` entries (of PDFQUEUE_API_TOKENS) as {stored token: tenant}; every error
    names an entry by position only."""
    tokens: dict[str, str] = {}
    seen: dict[str, str] = {}  # hash -> tenant
    for number, entry in enumerate(entries, start=1):
        tenant, sep, token = entry.partition(":")
        where = f"PDFQUEUE_API_TOKENS entry {number}"
        if not sep or not tenant or not token or tenant == "sha256":
            msg = f"{where} is not tenant:token"
            raise ValueError(msg)
        if not _TENANT.match(tenant):
            msg = f"{where}: a tenant is 1-63 letters, digits, '_', '.' or '-'"
            raise ValueError(msg)
        problem = token_problem(token)
        if problem:
            msg = f"{where}: {problem}"  # no tenant: with a colon in a token, it could be a part
            raise ValueError(msg)
        stored = token_hash(token)
        if stored in seen:
            msg = f"{where} (tenant {tenant}) repeats the token of tenant {seen[stored]}"
            raise ValueError(msg)
        seen[stored] = tenant
        tokens[token] = tenant
    return tokens


def token_hash(token: str) -> str:
    """A token as its hash (`sha256:<hex>`), so a plain entry and a hashed entry of one token
    are one token; a hash stays as it is."""
    return token if token.startswith("sha256:") else _digest(token)


def _digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def tenant_for(tokens: dict[str, str], presented: str) -> str | None:
    """The tenant of a presented token; entries written `sha256:<hex>` are compared by hash
    (the hash itself is no token)."""
    digest = _digest(presented)
    for stored, tenant in tokens.items():
        candidate = digest if stored.startswith("sha256:") else presented
        if hmac.compare_digest(candidate.encode(), stored.encode()):
            return tenant
    return None


def tokens_from_file(path: str) -> dict[str, str]:
    """The tokens of PDFQUEUE_API_TOKENS_FILE (`tenant:token` entries, one per line or comma
    separated) as `parse_api_tokens` reads them; ValueError naming what is wrong, never the
    content."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # the reason, never the content
        msg = f"PDFQUEUE_API_TOKENS_FILE cannot be read: {type(exc).__name__}"
        raise ValueError(msg) from None
    return parse_api_tokens(e for e in (x.strip() for x in re.split(r"[,\n]", text)) if e)


log = logging.getLogger(__name__)
_KEPT = "the tokens read before stay"
RECHECK_S = 1.0
"""How often, at most, a request makes the API look whether its tokens file was replaced."""


class TokenFile:
    """The tokens of a file that is replaced while the API runs (a Kubernetes Secret's
    rotation swaps a symlink; an editor or `mv` a file): read again when the file it resolves
    to changes (inode, size or modification time), looked at no more than once per
    `RECHECK_S`. A replacement that does not parse, or holds no token, is refused with an
    error in the log, and the tokens read last stay."""

    def __init__(self, path: str, tokens: dict[str, str]) -> None:
        self.path = path
        self._tokens = tokens
        self._seen = self._identity()
        self._checked = time.monotonic()

    def current(self) -> dict[str, str]:
        """The tokens as the file holds them now (within `RECHECK_S`)."""
        now = time.monotonic()
        if now - self._checked >= RECHECK_S:
            self._checked = now
            seen = self._identity()
            if seen != self._seen:
                self._seen = seen
                self._reload()
        return self._tokens

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _reload(self) -> None:
        try:
            tokens = tokens_from_file(self.path)
        except ValueError as exc:  # says which entry, never a token
            log.error("PDFQUEUE_API_TOKENS_FILE changed and was refused (%s): %s", exc, _KEPT)
            return
        if not tokens:
            log.error("PDFQUEUE_API_TOKENS_FILE changed to hold no token: %s", _KEPT)
            return
        self._tokens = tokens
        log.warning("PDFQUEUE_API_TOKENS_FILE read again: %d tokens", len(tokens))
