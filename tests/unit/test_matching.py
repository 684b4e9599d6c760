"""Choosing the user among a file's candidates: a clean match links, a doubt never guesses."""

from __future__ import annotations

from pdfqueue.domain.placeholders import PLACEHOLDER_DOMAINS
from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_worker.candidates import Candidate, Source
from pdfqueue_worker.matching import Verdict, choose, placeholder, wanted

JANE = UserRow(1, "jane@x.io", None)
BOB = UserRow(2, "bob@x.io", None)
USERS = {"jane@x.io": JANE, "bob@x.io": BOB, "hello@reallygreatsite.com": UserRow(3, "", None)}
DOMAINS = frozenset(PLACEHOLDER_DOMAINS)


def c(address: str, source: Source = Source.TEXT, *, contact: bool = True) -> Candidate:
    return Candidate(address, source, 0, contact)


def test_a_clean_match_links_and_nobody_is_no_link() -> None:
    assert choose([c("nobody@x.io"), c("jane@x.io")], USERS, DOMAINS) == Verdict(JANE)
    assert choose([c("nobody@x.io")], USERS, DOMAINS) == Verdict()
    assert choose([c("jane@x.io", Source.ANNOTATION)], USERS, DOMAINS) == Verdict(JANE)


def test_the_same_user_twice_is_one_user() -> None:
    found = [c("jane@x.io"), c("jane@x.io", Source.ANNOTATION), c("jane@x.io", Source.OCR)]
    assert choose(found, USERS, DOMAINS) == Verdict(JANE)


def test_an_uncertain_candidate_links_only_when_it_names_exactly_one_user() -> None:
    for source in (Source.DEOBFUSCATED, Source.LINE_JOIN, Source.OCR):
        assert choose([c("jane@x.io", source)], USERS, DOMAINS) == Verdict(JANE)
        two = [c("jane@x.io", source), c("bob@x.io", Source.LINE_JOIN, contact=False)]
        assert choose(two, USERS, DOMAINS) == Verdict(ambiguous=True)


def test_two_users_in_the_contact_area_are_ambiguous() -> None:
    assert choose([c("jane@x.io"), c("bob@x.io")], USERS, DOMAINS) == Verdict(ambiguous=True)


def test_the_only_user_in_the_contact_area_wins_over_one_further_down() -> None:
    found = [c("bob@x.io", contact=False), c("jane@x.io")]
    assert choose(found, USERS, DOMAINS) == Verdict(JANE)
    both_far = [c("bob@x.io", contact=False), c("jane@x.io", contact=False)]
    assert choose(both_far, USERS, DOMAINS) == Verdict(ambiguous=True)


def test_placeholder_domains_never_link_nor_count_as_a_second_user() -> None:
    template = c("hello@reallygreatsite.com")
    assert choose([template], USERS, DOMAINS) == Verdict()
    assert choose([template, c("jane@x.io")], USERS, DOMAINS) == Verdict(JANE)
    assert placeholder("someone@mail.example.com", DOMAINS)
    assert placeholder("a@EXAMPLE.ORG".lower(), DOMAINS)
    assert not placeholder("a@notexample.com", DOMAINS)
    assert not placeholder("a@people.example", DOMAINS)
    assert wanted([template, c("jane@x.io"), c("jane@x.io")], DOMAINS) == ["jane@x.io"]
