"""Finding candidate email addresses in extracted text, normalized and in reading order."""

from __future__ import annotations

import re
import unicodedata

# Deliberately practical rather than RFC 5322: no quoted local parts or IP literals, which
# never identify a user in a résumé. The domain must end in an alphabetic TLD.
#
# One regex over the whole text (what this used to be) is quadratic: on a long run of
# local-part characters the engine tries the local part again from every position of the
# run. The search is therefore anchored on each `@` and reads bounded windows around it:
# at most 64 characters to the left, and 126 labels (all a 253-character domain can have)
# to the right, where no `@` can hide. Every character is examined a bounded number of
# times, so the cost is linear in the text whatever the text is.
_ATOM = "a-z0-9!#$%&'*+/=?^_`{|}~-"
MAX_LOCAL_CHARS = 64
"""Longest local part (RFC 5321); a longer run before an `@` is no address."""
MAX_DOMAIN_CHARS = 253
"""Longest domain (RFC 1035); a longer one after an `@` is no address."""
DEFAULT_MAX_PAGE_CHARS = 100_000
"""Text of one page examined for addresses (the settings default; a dense page has ~15,000)."""

_AT_DOMAIN = re.compile(
    rf"(?<=[{_ATOM}])@"
    r"((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.){1,126}[a-z]{2,63}(?![a-z0-9-]))"
)
"""An `@` after a local-part character, and the domain after it; other `@` are skipped in C."""
_LOCAL_MIRRORED = re.compile(rf"[{_ATOM}]+(?:\.[{_ATOM}]+)*")
"""The local part read right to left from its `@` (a dot-atom's mirror image is a dot-atom):
the greedy match is the longest valid one, which is what a left-to-right search finds first."""


def normalize(text: str) -> str:
    """NFKC folds look-alikes (full-width @, ligatures), then lower-case."""
    return unicodedata.normalize("NFKC", text).lower()


def find_emails(text: str, max_chars: int = DEFAULT_MAX_PAGE_CHARS) -> list[str]:
    """Every distinct email in the first `max_chars` of `text`, first occurrence first."""
    flat = normalize(text[:max_chars])
    mirror = flat[::-1]
    size = len(flat)
    seen: dict[str, None] = {}
    done = 0  # end of the last address found: the next local part starts at or after it
    for found in _AT_DOMAIN.finditer(flat):
        at, end = found.start(), found.end()
        if end - at - 1 > MAX_DOMAIN_CHARS:
            continue
        # One character past the limit, so that a longer local part is seen to be longer.
        lo = max(done, at - MAX_LOCAL_CHARS - 1)
        local = _LOCAL_MIRRORED.match(mirror, size - at, size - lo)
        if local is None or local.end() - local.start() > MAX_LOCAL_CHARS:
            continue
        seen.setdefault(flat[size - local.end() : end], None)
        done = end
    return list(seen)
