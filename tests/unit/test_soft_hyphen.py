"""Soft hyphens a producer drew as `-`: an uncertain candidate, never a wrong link."""

from __future__ import annotations

import pytest

from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_worker.candidates import Source, dehyphenated, page_candidates
from pdfqueue_worker.matching import Verdict, choose

DOMAINS = frozenset({"example.com"})
JOHN = UserRow(1, "john.smith@people.example", None)
HYPHENED = UserRow(2, "jo-hn.smith@people.example", None)
MARY = UserRow(3, "mary-jane.doe@people.example", None)


def found(text: str, **kwargs: object) -> dict[str, Source]:
    return {c.address: c.source for c in page_candidates(text, 0, **kwargs)}  # type: ignore[arg-type]


def verdict(text: str, *users: UserRow, uris: tuple[str, ...] = ()) -> Verdict:
    return choose(page_candidates(text, 0, uris=uris), {u.email: u for u in users}, DOMAINS)


def test_a_hyphen_inside_a_local_part_gives_the_dehyphenated_form_as_uncertain() -> None:
    assert found("Jane Doe | jo-hn.smith@people.example | Berlin") == {
        "jo-hn.smith@people.example": Source.TEXT,  # as written: still trusted as written
        "john.smith@people.example": Source.DEHYPHENATED,
    }


def test_dehyphenated_forms_are_every_combination_of_hyphens_between_letters() -> None:
    assert dehyphenated("a-b.c-d@x.io") == ["ab.c-d@x.io", "a-b.cd@x.io", "ab.cd@x.io"]
    # a hyphen next to a digit, a dot or another hyphen is no hyphenation point
    assert dehyphenated("jane-2@x.io") == []
    assert dehyphenated("jane.-doe@x.io") == []
    assert dehyphenated("jane--doe@x.io") == []
    # the domain's hyphens are the domain's
    assert dehyphenated("jane@mail-box.io") == []
    # more than a producer would draw: taken as written
    assert dehyphenated("a-b-c-d-e@x.io") == []


def test_the_dehyphenated_user_links_when_nobody_has_the_address_as_written() -> None:
    assert verdict("jo-hn.smith@people.example", JOHN) == Verdict(JOHN)


def test_the_address_as_written_links_when_only_its_user_exists() -> None:
    assert verdict("jo-hn.smith@people.example", HYPHENED) == Verdict(HYPHENED)
    assert verdict("mary-jane.doe@people.example", MARY) == Verdict(MARY)


def test_both_forms_being_users_is_a_guess_and_links_neither() -> None:
    """`jo-hn.smith` and `john.smith` both exist: the hyphen may be typed (its user's file) or
    a drawn soft hyphen (the other's). Either link could be the wrong one, so neither."""
    assert verdict("jo-hn.smith@people.example", JOHN, HYPHENED) == Verdict(ambiguous=True)
    # the same with the address in OCR text: both OCR, two uncertain users
    ocr = page_candidates("jo-hn.smith@people.example", 0, source=Source.OCR)
    users = {u.email: u for u in (JOHN, HYPHENED)}
    assert {c.source for c in ocr} == {Source.OCR}
    assert choose(ocr, users, DOMAINS) == Verdict(ambiguous=True)


def test_a_clean_address_of_another_user_on_the_page_is_never_outvoted() -> None:
    # john's hyphen-free address written as it is: he is the owner, whoever else exists
    text = "john.smith@people.example\nReferee: jo-hn.smith@people.example"
    assert found(text)["john.smith@people.example"] is Source.TEXT
    assert verdict(text, JOHN) == Verdict(JOHN)


def test_a_link_annotation_is_taken_as_typed() -> None:
    uris = ("mailto:jo-hn.smith@people.example",)
    assert found("Email me", uris=uris) == {"jo-hn.smith@people.example": Source.ANNOTATION}
    assert verdict("Email me", JOHN, uris=uris) == Verdict()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a typed soft hyphen inside a line is invisible: the address as written
        ("jo\u00adhn.smith@people.example", {"john.smith@people.example": Source.TEXT}),
        # a soft hyphen ending a line is the hyphen of a break: both ways, both uncertain
        (
            "Mail: jo\u00ad\r\nhn.smith@people.example",
            {
                "hn.smith@people.example": Source.LINE_JOIN,
                "john.smith@people.example": Source.LINE_JOIN,
                "jo-hn.smith@people.example": Source.LINE_JOIN,
            },
        ),
        # U+2010 (a hyphenating producer's hyphen) is a hyphen, not the end of the address
        (
            "jo\u2010hn.smith@people.example",
            {
                "jo-hn.smith@people.example": Source.TEXT,
                "john.smith@people.example": Source.DEHYPHENATED,
            },
        ),
        (
            "Mail: jo\u2010\nhn.smith@people.example",
            {
                "hn.smith@people.example": Source.LINE_JOIN,
                "john.smith@people.example": Source.LINE_JOIN,
                "jo-hn.smith@people.example": Source.LINE_JOIN,
            },
        ),
    ],
)
def test_what_producers_write_for_a_soft_hyphen(text: str, expected: dict[str, Source]) -> None:
    assert found(text) == expected


def test_a_cut_short_address_after_a_soft_hyphen_never_links_its_stranger() -> None:
    """`hn.smith` is a real user, but the page's `jo` + soft hyphen + line end says the
    address is john's (or jo-hn's): the cut-short tail alone is no clean candidate."""
    stranger = UserRow(4, "hn.smith@people.example", None)
    for text in ("jo\u00ad\nhn.smith@people.example", "jo\u2010\nhn.smith@people.example"):
        assert verdict(text, stranger, JOHN) == Verdict(ambiguous=True)
        assert verdict(text, JOHN) == Verdict(JOHN)


# What LibreOffice 7.4's PDFs give in PDFium's text layer (seen in the bench's libreoffice
# corpus): a hyphenated break merged into one line with U+FFFE for its hyphen, sometimes on
# a line that also holds another, untouched address; and, in a justified line PDFium did not
# merge, the hyphen spaced off at the line end.


def test_an_address_beside_a_merged_hyphenation_stays_as_written() -> None:
    # the body's last word, hyphenated, merged with the footer that holds the address
    text = "Maintained re\ufffeBerlin | +1 555 7859 | tim.hamilton@people.example"
    assert found(text) == {"tim.hamilton@people.example": Source.TEXT}


def test_an_address_merged_at_its_own_hyphenation_is_uncertain_and_never_cut_short() -> None:
    assert found("an email to edsger.no\ufffevak@people.example or a call") == {
        "edsger.novak@people.example": Source.LINE_JOIN,
        "edsger.no-vak@people.example": Source.LINE_JOIN,
    }
    stranger = UserRow(5, "vak@people.example", None)
    assert verdict("email to edsger.no\ufffevak@people.example", stranger) == Verdict()


def test_a_hyphen_spaced_off_at_a_line_end_joins_the_address_it_splits() -> None:
    assert found("an email to frances.ivanova@peo -\r\nple.example or a call") == {
        "frances.ivanova@people.example": Source.LINE_JOIN,
        "frances.ivanova@peo-ple.example": Source.LINE_JOIN,
    }
    # split in the local part: the cut-short tail is no clean address of someone else
    assert found("Mail: fran -\nces.ivanova@people.example")["ces.ivanova@people.example"] is (
        Source.LINE_JOIN
    )
    # after a whole address, a spaced hyphen is a dash: the address stays as written
    assert found("jane@x.io -\nPhone +1 555 0100") == {"jane@x.io": Source.TEXT}


def test_a_hyphen_drawn_as_a_minus_sign_is_a_hyphen() -> None:
    """PostScript's ISOLatin1Encoding has /minus where ASCII has `-`: Ghostscript's PDF of such
    a program reads U+2212 back for a typed hyphen, and a soft hyphen (0xAD, /hyphen) as `-`."""
    assert found("Other: jane\u2212doe@people.example") == {
        "jane-doe@people.example": Source.TEXT,
        "janedoe@people.example": Source.DEHYPHENATED,
    }
    stranger = UserRow(6, "doe@people.example", None)
    assert verdict("jane\u2212doe@people.example", stranger) == Verdict()
