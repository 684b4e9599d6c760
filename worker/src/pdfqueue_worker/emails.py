"""Finding candidate email addresses in extracted text, normalized and in reading order."""

from __future__ import annotations

import re
import unicodedata

# Deliberately practical rather than RFC 5322: no quoted local parts or IP literals, which
# never identify a user in a résumé. The domain must end in an alphabetic TLD.
_EMAIL = re.compile(
    r"[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}(?![a-z0-9-])",
)


def normalize(text: str) -> str:
    """NFKC folds look-alikes (full-width @, ligatures), then lower-case."""
    return unicodedata.normalize("NFKC", text).lower()


def find_emails(text: str) -> list[str]:
    """Every distinct email in `text`, first occurrence first."""
    seen: dict[str, None] = {}
    for match in _EMAIL.finditer(normalize(text)):
        seen.setdefault(match.group(0), None)
    return list(seen)
