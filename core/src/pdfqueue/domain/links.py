"""What the users table's link column holds for a stored PDF: its key, or a URL made of it."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

_KEY = "\0"
"""Stands for the key while the template is filled in (no setting can hold it)."""


@dataclass(frozen=True)
class UserLinks:
    """The link column's text around an object's key: `before` + key + `after`.

    Built from `PDFQUEUE_USERS_LINK_TEMPLATE` once; the claim writes `link(key)`, and
    erasure and retention read `key(link)` back, so that a link pdfqueue did not write (the
    host's own, another template's) is never taken for one of its objects.
    """

    before: str = ""
    after: str = ""

    @classmethod
    def of(cls, template: str, storage_url: str) -> UserLinks:
        """The links `template` makes, with the bucket and prefix of `storage_url`."""
        parts = urlsplit(storage_url)
        bucket = parts.netloc if parts.scheme == "s3" else ""
        prefix = parts.path.strip("/") if parts.scheme == "s3" else ""
        text = template.format(key=_KEY, bucket=bucket, prefix=f"{prefix}/" if prefix else "")
        before, after = text.split(_KEY)
        return cls(before, after)

    def link(self, key: str) -> str:
        return f"{self.before}{key}{self.after}"

    def key(self, link: str) -> str | None:
        """The key `link` names, or None if this template did not make it."""
        if len(link) <= len(self.before) + len(self.after):
            return None
        if not (link.startswith(self.before) and link.endswith(self.after)):
            return None
        return link[len(self.before) : len(link) - len(self.after)]
