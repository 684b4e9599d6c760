"""Addresses that are never a user's: the domains résumé templates put in their examples."""

from __future__ import annotations

PLACEHOLDER_DOMAINS = (
    *("example.com", "example.org", "example.net", "reallygreatsite.com", "yourdomain.com"),
    *("domain.com", "email.com", "youremail.com", "yourname.com", "yoursite.com", "company.com"),
    *("yourwebsite.com", "website.com", "mysite.com", "sample.com", "test.com"),
)
"""Domains of résumé-template placeholders (Canva's `hello@reallygreatsite.com`, Word's
`someone@example.com`, `yourname@email.com`, `you@yourdomain.com`): never a user's.
`email.com` is a real mailbox provider too, but far more often a template's."""
