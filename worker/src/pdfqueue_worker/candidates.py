"""Candidate addresses of one page: cleaned text, line-end joins, de-obfuscation, soft hyphens
drawn as hyphens, mailto links."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations, pairwise
from urllib.parse import unquote

from email_validator import EmailNotValidError, validate_email

from pdfqueue_worker.emails import DEFAULT_MAX_PAGE_CHARS, MAX_DOMAIN_CHARS, find_emails


class Source(StrEnum):
    """Where a candidate came from: how far it can be trusted (see `matching`)."""

    TEXT = "text"
    """Written in the text layer as it is, after Unicode clean-up only."""
    ANNOTATION = "annotation"
    """A `mailto:` link annotation of the page."""
    DEOBFUSCATED = "deobfuscated"
    """Spelled `name [at] domain [dot] com` or the like."""
    LINE_JOIN = "line_join"
    """Split at a line end and rejoined, or cut short by such a split."""
    OCR = "ocr"
    """Read by OCR from the page's image."""
    DEHYPHENATED = "dehyphenated"
    """An address of the page with a hyphen of its local part dropped: a producer may have
    drawn a soft hyphen (or a hyphenation point) as `-` where the person typed nothing."""


STRONG = frozenset({Source.TEXT, Source.ANNOTATION})
"""Sources whose exact match on a user links; the others link only when unambiguous."""
CONTACT_AREA_CHARS = 1500
"""Page one's first characters of cleaned text, the contact area of a résumé (its header,
or a sidebar read first): where two users' addresses make a file ambiguous."""
SHORT_PIECE = 3
"""Longest head of a line that may end an address whose tail looks whole (`x.co` + `m`)."""
MAX_TOKEN_CHARS = 64 + 1 + MAX_DOMAIN_CHARS
"""Longest piece of one line joined to the next: an address is never longer."""
MAX_SOFT_HYPHENS = 3
"""Most hyphens of one local part that may each be a soft hyphen drawn as `-` (every
combination is tried: 7 variants at most); a local part with more is taken as written."""


@dataclass(frozen=True)
class Candidate:
    """One possible address of the file's owner, with its provenance."""

    address: str
    source: Source
    page: int
    contact: bool = False
    """Found in page one's contact area (or a link annotation on page one)."""


_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u200c\u200d\u2060\ufeff\r"), None)
"""Soft hyphen, zero-width characters and the BOM vanish; a CR is a line end's half."""
_HYPHENS = {ord("\u2010"): "-", ord("\u2011"): "-", ord("\u2212"): "-"}
"""Unicode's hyphens (NFKC keeps U+2010, a hyphenating producer's glyph) and the minus sign
(PostScript's ISOLatin1Encoding puts /minus where ASCII has `-`: Ghostscript's PDFs of such
programs read `jane` U+2212 `doe@`) read as `-`: else the address search stops at one and finds a
shorter address, as if it were written clean."""
_TABLE = _INVISIBLE | _HYPHENS
_LINE_END_SOFT = re.compile("\u00ad[ \t]*(?=\r?\n)")
"""A soft hyphen that ends a line was drawn as the hyphen of a break: a line-end hyphen."""
_SOFT_POINT = re.compile("(?<=[a-z])-(?=[a-z])")
"""A hyphen between two letters of a local part: where a word is hyphenated."""
_GLYPH = re.compile("[\ue000-\uf8ff\U000f0000-\U0010ffff\ufffd]")
"""Private-use glyphs (icon fonts: an envelope glued to the address) and U+FFFD: a space."""
_BRACKET_AT = re.compile(r"[ \t]{0,3}[\[({<][ \t]{0,2}at[ \t]{0,2}[\])}>][ \t]{0,3}", re.IGNORECASE)
_BRACKET_DOT = re.compile(
    r"[ \t]{0,3}[\[({<][ \t]{0,2}dot[ \t]{0,2}[\])}>][ \t]{0,3}", re.IGNORECASE
)
_WORD_AT = re.compile(r"(?<=[a-z0-9]) {1,3}at {1,3}(?=[a-z0-9])", re.IGNORECASE)
_WORD_DOT = re.compile(r"(?<=[a-z0-9]) {1,3}dot {1,3}(?=[a-z0-9])", re.IGNORECASE)
_SPACED_AT = re.compile(r"(?<=[a-z0-9._-])[ \t]{0,3}@[ \t]{0,3}(?=[a-z0-9])", re.IGNORECASE)
_SPACED_DOT = re.compile(
    r"(?<=[a-z0-9])[ \t]{1,2}\.[ \t]{0,2}(?=(?:com|org|net|edu)\b)", re.IGNORECASE
)
_DOT_SPACE = re.compile(r"(?<=[a-z0-9])\. (?=[a-z0-9._-]{1,64} {0,3}@)", re.IGNORECASE)
"""`frances. liskov@...`: OCR reads a space after a dot inside a local part."""
_HINT = re.compile(r"@|[\[({<] ?at ?[\])}>]| dot ", re.IGNORECASE)
"""A line worth de-obfuscating: most lines are not, and skipping them keeps pages fast."""
_NEEDLES = ("@", "at]", "at)", "at}", "at>", " dot ")
"""What `_HINT` looks for, in lower case: `str.find` on each is many times faster than one
regular expression over the page."""
_LOOK_ALIKES = ("\ufe6b", "\uff20")
"""The characters NFKC folds to @ (only in text that is not ASCII)."""


def clean(text: str) -> str:
    """NFKC (ligatures, full-width @), invisible characters gone (a soft hyphen ending a line
    becomes that line's hyphen), Unicode hyphens and the minus sign `-`, icon glyphs a space:
    the text every candidate is read from (the address search folds case itself)."""
    folded = unicodedata.normalize("NFKC", text)
    if "\u00ad" in folded:
        folded = _LINE_END_SOFT.sub("-", folded)
    return _GLYPH.sub(" ", folded.translate(_TABLE))


def valid(address: str) -> bool:
    """Syntax only (no DNS), by email-validator, which knows the RFCs' corner cases."""
    try:
        validate_email(address, check_deliverability=False, allow_smtputf8=False, strict=True)
    except EmailNotValidError:
        return False
    return True


def page_candidates(
    text: str,
    page: int,
    *,
    source: Source = Source.TEXT,
    uris: tuple[str, ...] = (),
    max_chars: int = DEFAULT_MAX_PAGE_CHARS,
) -> list[Candidate]:
    """Every distinct candidate of one page, in reading order, annotations first.

    `source` is TEXT for a text layer and OCR for recognized text (every candidate of OCR
    text is OCR, whatever the step that found it)."""
    found: dict[str, Candidate] = {}

    def add(address: str, how: Source, at: int) -> None:
        if address not in found and valid(address):
            how = source if source is Source.OCR else how
            contact = page == 0 and (at < CONTACT_AREA_CHARS or how is Source.ANNOTATION)
            found[address] = Candidate(address, how, page, contact)

    for uri in uris:
        address = mailto_address(uri)
        if address:
            add(address, Source.ANNOTATION, 0)
    regions = _regions(text[:max_chars])
    for start, region in regions:
        _region_candidates(_lines(clean(region), start), add)
    # After every other candidate, so that an address written as it is stays as trusted as it is.
    for written in list(found.values()):
        if written.source is not Source.ANNOTATION:  # a link's target is typed, never drawn
            for address in dehyphenated(written.address):
                if address not in found and valid(address):
                    how = Source.OCR if source is Source.OCR else Source.DEHYPHENATED
                    found[address] = Candidate(address, how, page, written.contact)
    return list(found.values())


def dehyphenated(address: str) -> list[str]:
    """`address` with one or more of the hyphens between letters of its local part dropped,
    each a soft hyphen a producer may have drawn (`jo-hn.smith@x` -> `john.smith@x`): every
    combination of up to MAX_SOFT_HYPHENS of them, fewest dropped first."""
    local, _, domain = address.rpartition("@")
    if "-" not in local:
        return []
    points = [m.start() for m in _SOFT_POINT.finditer(local)]
    if not points or len(points) > MAX_SOFT_HYPHENS:
        return []
    out = []
    for size in range(1, len(points) + 1):
        for dropped in combinations(points, size):
            kept = "".join(ch for i, ch in enumerate(local) if i not in dropped)
            out.append(f"{kept}@{domain}")
    return out


def _region_candidates(
    lines: list[tuple[int, str]], add: Callable[[str, Source, int], None]
) -> None:
    """The candidates of consecutive cleaned lines: as written, joined, de-obfuscated."""
    weak = _joined(lines)
    for start, line in lines:
        if "@" in line:
            variants = _merged(line)
            untouched = _untouched(line, variants) if len(variants) > 1 else frozenset()
            for variant in variants:
                for address in find_emails(variant):
                    merged = variant is not line and address not in untouched
                    joined = address in weak or merged
                    add(address, Source.LINE_JOIN if joined else Source.TEXT, start)
    for address, at in weak.items():
        add(address, Source.LINE_JOIN, at)
    for start, line in lines:
        if _HINT.search(line):
            for variant in _merged(line):
                for address in find_emails(deobfuscate(variant)):
                    add(address, Source.DEOBFUSCATED, start)


def _regions(text: str) -> list[tuple[int, str]]:
    """(offset, text) of each run of lines around a hint of an address (each hinted line
    with its neighbours, for joins): all that is cleaned and searched. Most of a page is
    neither, and examining only the rest keeps the text path as fast as before."""
    regions: list[tuple[int, str]] = []
    end = hinted = -1  # end of the last region, and of the last hinted line in it
    for spot in _spots(text):
        if spot < hinted:
            continue  # a second hint on a line already taken
        line_start = text.rfind("\n", 0, spot) + 1
        start = text.rfind("\n", 0, max(line_start - 1, 0)) + 1 if line_start else 0
        hinted = _line_end(text, spot)
        stop = _line_end(text, hinted + 1)
        if regions and start <= end:
            start = regions.pop()[0]
        end = stop
        regions.append((start, text[start:end]))
    return regions


def _spots(text: str) -> list[int]:
    """Where the text has a hint of an address, in order."""
    ascii_only = text.isascii()
    low = text.lower() if ascii_only else text  # lower() keeps ASCII offsets, not all others
    needles = _NEEDLES if ascii_only else _NEEDLES + _LOOK_ALIKES + _upper(_NEEDLES[1:])
    spots = []
    for needle in needles:
        at = low.find(needle)
        while at >= 0:
            spots.append(at)
            at = low.find(needle, at + 1)
    return sorted(spots)


def _upper(needles: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n.upper() for n in needles)


def _line_end(text: str, at: int) -> int:
    """Where the line holding `at` ends (the text's end for its last line)."""
    if at > len(text):
        return len(text)
    found = text.find("\n", at)
    return len(text) if found < 0 else found


def _lines(flat: str, offset: int = 0) -> list[tuple[int, str]]:
    """(offset, line) of each line."""
    out = []
    start = offset
    for line in flat.split("\n"):
        out.append((start, line))
        start += len(line) + 1
    return out


def _joined(lines: list[tuple[int, str]]) -> dict[str, int]:
    """Addresses split at a line end, rejoined (a hyphen there both dropped and kept), and
    the cut-short addresses they extend: both are LINE_JOIN, trusted only when unambiguous."""
    weak: dict[str, int] = {}
    for (start, line), (_, following) in pairwise(lines):
        tail = _last_token(line)
        head = following.lstrip().partition(" ")[0][:MAX_TOKEN_CHARS]
        if not tail or not head or "@" not in tail + head or not _continues(tail, head):
            continue
        variants = [tail + head]
        if tail.endswith(("-", "\x02")):
            variants = [tail[:-1] + head, tail[:-1] + "-" + head]
        alone = set(find_emails(tail)) | set(find_emails(head))
        for variant in variants:
            for address in find_emails(variant):
                if address not in alone:
                    weak.setdefault(address, start)
                    for part in alone:  # cut short by the line end: no longer clean
                        weak.setdefault(part, start)
    return weak


def _last_token(line: str) -> str:
    """The line's last word, to be joined to the next line's first. A lone `-` after a piece
    of an address (`jane.doe@peo -`: PDFium spaces off the hyphen of a justified line it did
    not merge) is that piece's hyphen; after a whole address it is a dash, and not joined."""
    stripped = line.rstrip()
    if stripped.endswith(" -"):
        before = stripped[:-1].rstrip().rpartition(" ")[2]
        if before and not find_emails(before):
            return (before + "-")[-MAX_TOKEN_CHARS:]
    return stripped.rpartition(" ")[2][-MAX_TOKEN_CHARS:]


def _untouched(line: str, variants: tuple[str, ...]) -> frozenset[str]:
    """The addresses of a line PDFium merged (`_merged`) that the merge did not touch: found
    the same in every reading, the marker read as a space too."""
    spaced = line.replace("\ufffe", " ").replace("\x02", " ")
    same = set(find_emails(spaced))
    for variant in variants:
        same &= set(find_emails(variant))
    return frozenset(same)


def _merged(line: str) -> tuple[str, ...]:
    """The line as it is, or, where PDFium merged a word hyphenated at a line end (it marks
    the hyphen U+FFFE, older versions U+0002), the joined and the hyphen-kept variants."""
    if "\ufffe" not in line and "\x02" not in line:
        return (line,)
    joined = line.replace("\ufffe", "").replace("\x02", "")
    return joined, line.replace("\ufffe", "-").replace("\x02", "-")


def _continues(tail: str, head: str) -> bool:
    """Whether `head` may continue an address cut at the end of `tail`: the tail ends in
    what cannot end an address (`-`, `.`, `@`, a domain without its TLD), or the head is
    a short lower-case piece (`m` of `.co` + `m`). A word after a whole address, like
    `Phone` or `linkedin.example/in/jane`, is the next field, not the rest of it; a word
    before an address is the previous one, unless it ends in `-`, `.` or `_`."""
    if tail.endswith(("-", ".", "_", "\x02")):
        return True
    if "@" not in tail:
        return False
    if tail.endswith("@") or head.startswith((".", "-")) or not find_emails(tail):
        return True
    return len(head.rstrip(".,;|")) <= SHORT_PIECE and head[0].islower()


def deobfuscate(line: str) -> str:
    """`name [at] domain [dot] com`, `name (at) domain.com`, `name at domain dot com`,
    `name @ domain . com`: the address they spell. Every quantifier is bounded, so the
    cost stays linear in the line."""
    out = _BRACKET_DOT.sub(".", _BRACKET_AT.sub("@", line))
    if _WORD_DOT.search(out):  # plain words only as a pair: `at` alone is ordinary prose
        out = _WORD_DOT.sub(".", _WORD_AT.sub("@", out))
    out = _DOT_SPACE.sub(".", out)
    return _SPACED_DOT.sub(".", _SPACED_AT.sub("@", out))


def mailto_address(uri: str) -> str:
    """The address of a `mailto:` URI ("" when it is none): percent-decoded, the first of a
    list, no query; other URIs are no address."""
    uri = uri.strip()[:1024]
    if uri[:7].lower() != "mailto:":
        return ""
    target = unquote(uri[7:]).partition("?")[0].split(",")[0].strip()
    found = find_emails(target)
    return found[0] if len(found) == 1 and clean(target).lower() == found[0] else ""
