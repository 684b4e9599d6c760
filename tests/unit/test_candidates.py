"""Candidate addresses of a page: every way a résumé writes one, each with its provenance."""

from __future__ import annotations

import pytest

from pdfqueue_worker.candidates import (
    Candidate,
    Source,
    clean,
    deobfuscate,
    mailto_address,
    page_candidates,
    valid,
)


def found(text: str, **kwargs: object) -> dict[str, Source]:
    return {c.address: c.source for c in page_candidates(text, 0, **kwargs)}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("\ufb01rst.last@x.io", "first.last@x.io"),  # the fi ligature
        ("jane\u00ad.doe@x.io", "jane.doe@x.io"),  # soft hyphen
        ("jane.doe@x\u200b.io", "jane.doe@x.io"),  # zero-width space
        ("\ufeffjane\u200d.doe@x.io", "jane.doe@x.io"),  # BOM, zero-width joiner
        ("\uf0e0jane.doe@x.io", "jane.doe@x.io"),  # an icon font's envelope glued to it
        ("\U000f02bcjane.doe@x.io", "jane.doe@x.io"),  # a supplementary private-use icon
        ("JANE\uff20X.IO", "jane@x.io"),  # full-width @, capitals
        ("Jane.Doe@X.io\r\nPhone", "jane.doe@x.io"),  # a new capitalized line is no join
    ],
)
def test_unicode_clean_up_keeps_the_address_clean(text: str, address: str) -> None:
    assert found(text) == {address: Source.TEXT}


def test_an_address_split_at_a_line_end_gives_both_variants_and_is_not_clean() -> None:
    assert found("Mail: jane.smith-\ndoe@x.io") == {
        "doe@x.io": Source.LINE_JOIN,  # cut short: no longer trusted as written
        "jane.smithdoe@x.io": Source.LINE_JOIN,
        "jane.smith-doe@x.io": Source.LINE_JOIN,
    }
    assert found("jane.doe@exam\nple.io") == {"jane.doe@example.io": Source.LINE_JOIN}
    # a domain cut after a complete-looking TLD: both are uncertain, neither is clean
    assert found("jane@x.co\nm") == {"jane@x.co": Source.LINE_JOIN, "jane@x.com": Source.LINE_JOIN}


@pytest.mark.parametrize(
    "text",
    [
        "jane.doe [at] mailbox [dot] io",
        "jane.doe(at)mailbox.io",
        "jane.doe {AT} mailbox {DOT} io",
        "jane.doe <at> mailbox.io",
        "jane.doe at mailbox dot io",
        "jane.doe @ mailbox.io",
        "jane.doe @mailbox.io",
        "jane.doe [at] mailbox.io",
    ],
)
def test_common_obfuscations_are_read_and_marked(text: str) -> None:
    assert found(text) == {"jane.doe@mailbox.io": Source.DEOBFUSCATED}


def test_plain_at_without_dot_is_prose_not_an_address() -> None:
    assert found("Engineer at mailbox.io since 2019") == {}
    assert deobfuscate("worked at Initech") == "worked at Initech"


def test_link_annotations_come_first_and_are_strong() -> None:
    uris = ("https://linkedin.example/in/jane", "MAILTO:Jane.Doe%40Mailbox.io?subject=Hi")
    assert page_candidates("no address in the text", 0, uris=uris) == [
        Candidate("jane.doe@mailbox.io", Source.ANNOTATION, 0, contact=True)
    ]


@pytest.mark.parametrize(
    ("uri", "address"),
    [
        ("mailto:a@b.io", "a@b.io"),
        ("mailto:a@b.io,c@d.io", "a@b.io"),
        ("mailto:%20a@b.io%20", "a@b.io"),
        ("mailto:a@b.io<script>", ""),
        ("mailto:a@b.io?cc=c@d.io", "a@b.io"),
        ("mailto:", ""),
        ("mailto:not an address", ""),
        ("http://a@b.io", ""),
        ("mailto:" + "a" * 5000 + "@b.io", ""),
        ("javascript:alert(1)//mailto:a@b.io", ""),
    ],
)
def test_mailto_uris(uri: str, address: str) -> None:
    assert mailto_address(uri) == address


def test_candidates_are_validated_by_a_real_email_library() -> None:
    assert valid("jane.doe@mailbox.io")
    assert not valid("jane@localhost.localdomain.local")  # special-use domain
    assert not valid("jane@x.123")  # numeric TLD
    assert not valid("a" * 65 + "@x.io")
    assert found("jane@mail.local and bob@x.io") == {"bob@x.io": Source.TEXT}


def test_ocr_text_makes_every_candidate_ocr() -> None:
    text = "Jane Doe\nBerlin | jane.doe @mailbox.io | x [at] y [dot] io"
    assert set(found(text, source=Source.OCR).values()) == {Source.OCR}
    assert set(found(text, source=Source.OCR)) == {"jane.doe@mailbox.io", "x@y.io"}


def test_contact_area_is_the_head_of_page_one_and_its_links() -> None:
    late = "x\n" * 1500 + "late@x.io"
    (head,) = page_candidates("head@x.io\n" + "filler\n" * 10, 0)
    (tail,) = page_candidates(late, 0)
    (other_page,) = page_candidates("head@x.io", 1)
    (link,) = page_candidates(late[:-10], 0, uris=("mailto:a@b.io",))
    assert (head.contact, tail.contact, other_page.contact, link.contact) == (
        True,
        False,
        False,
        True,
    )


@pytest.mark.parametrize(
    "text",
    [
        "@" * 200_000,
        "[at]" * 50_000,
        " at  dot " * 20_000,
        ("a" * 70 + "@\n") * 2000,
        "x-\n" * 60_000 + "@y.io",
        " " * 100_000 + "@",
        "\ufffd" * 100_000,
    ],
)
def test_hostile_text_is_bounded(text: str) -> None:
    """Every step is linear in the page (the test's timeout bounds it); nothing is found."""
    assert found(text) == {}


def test_clean_is_nfkc_without_invisibles() -> None:
    assert clean("ﬀ\u00ad\u200bx\ue000y\ufffd") == "ffx y "
