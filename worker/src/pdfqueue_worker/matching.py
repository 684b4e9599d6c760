"""Choosing a file's user among its candidates: never a guess, never the wrong user."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_worker.candidates import STRONG, Candidate


@dataclass(frozen=True)
class Verdict:
    """The user a file links to, or why none."""

    user: UserRow | None = None
    ambiguous: bool = False
    """Two different users could be the file's owner: no link, outcome `skipped_ambiguous`."""


def placeholder(address: str, domains: Collection[str]) -> bool:
    """Whether `address` is at a placeholder domain or one of its subdomains."""
    domain = address.rpartition("@")[2]
    while domain:
        if domain in domains:
            return True
        domain = domain.partition(".")[2]
    return False


def wanted(candidates: Iterable[Candidate], domains: Collection[str]) -> list[str]:
    """The addresses worth looking up: every candidate's but placeholders."""
    return sorted({c.address for c in candidates if not placeholder(c.address, domains)})


def choose(
    candidates: Iterable[Candidate], users: Mapping[str, UserRow], domains: Collection[str]
) -> Verdict:
    """The file's user from its candidates (in reading order) and the users they match.

    - A placeholder address never links.
    - A clean candidate (text layer, link annotation) links on an exact match; one found only
      by de-obfuscation, a line-join, dropping a hyphen that may be a drawn soft hyphen, or OCR
      links only if the uncertain candidates together match exactly one user (a joined and a
      hyphen-kept variant may both be someone's). So when `jo-hn@x` is written and both
      `jo-hn@x` and `john@x` are users, the file is ambiguous: either could be the owner.
    - Two different users are a guess: the one in page one's contact area links if it is
      the only one there; otherwise the file is ambiguous.
    """
    live = [c for c in candidates if c.address in users and not placeholder(c.address, domains)]
    weak = {users[c.address].id for c in live if c.source not in STRONG}
    if len(weak) > 1:
        return Verdict(ambiguous=True)
    owners = _distinct(users[c.address] for c in live)
    if len(owners) == 1:
        return Verdict(owners[0])
    in_contact = _distinct(users[c.address] for c in live if c.contact)
    if len(in_contact) == 1:
        return Verdict(in_contact[0])
    return Verdict(ambiguous=len(owners) > 1)


def _distinct(rows: Iterable[UserRow]) -> list[UserRow]:
    """Each user once, first seen first."""
    return list({row.id: row for row in rows}.values())
