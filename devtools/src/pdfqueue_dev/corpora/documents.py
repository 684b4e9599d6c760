"""Dense résumés as users upload them: 600-900 words a page, three producers, seeded."""

from __future__ import annotations

import io
import random
import zlib
from dataclasses import dataclass
from enum import StrEnum

from fpdf import FPDF
from reportlab.lib.pagesizes import A4
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen.canvas import Canvas

from pdfqueue_dev.corpora.rawpdf import assemble
from pdfqueue_dev.corpora.samples import (
    CITIES,
    COMPANIES,
    DEGREES,
    FIRST,
    FIXED_DATE,
    MONTHS,
    SCHOOLS,
    SKILLS,
    TITLES,
    VERBS,
    SampleFile,
    _mixed_case,
    _words,
)

PAGE_W, PAGE_H = A4
MARGIN = 50.0
FILLER = _words(
    "team product customers platform reliability delivery quality architecture services data"
    " pipelines latency cost incidents roadmap stakeholders requirements performance testing"
    " deployment monitoring security migration design review mentoring hiring planning budget"
    " analysis reporting integration automation scalability observability documentation"
    " onboarding compliance vendors contracts support operations research prototypes users"
)
LINKERS = _words("and with for across while using through within by to of the a in on")


class Density(StrEnum):
    """How much text a résumé has, and who made it: the bench's corpora."""

    SPARSE = "sparse"
    """A few short lines a page (the fpdf2 résumés of `pdfqueue_dev.corpora.samples`)."""
    TYPICAL = "typical"
    """1-2 dense pages of 600-900 words, the address on page one."""
    LONG = "long"
    """3-5 dense pages; the address on page one, for some only on the last page."""
    LIBREOFFICE = "libreoffice"
    """1-3 pages, about 5,000 characters on page one, written as documents and converted by
    LibreOffice (`pdfqueue_dev.corpora.libreoffice`): a producer no code in this repository is."""
    GHOSTSCRIPT = "ghostscript"
    """The typical corpus's résumés as PostScript programs, written as PDF by Ghostscript's
    `ps2pdf` (`pdfqueue_dev.corpora.ghostscript`); some with a soft hyphen drawn inside the
    address."""


class Producer(StrEnum):
    FPDF2 = "fpdf2"
    REPORTLAB = "reportlab"
    TEXLIKE = "texlike"
    """Hand-written content streams laid out as pdfTeX does: justified lines, no space
    characters (word gaps are TJ offsets), kerning inside words, Times in WinAnsi."""


PRODUCERS = tuple(Producer)
LAST_PAGE_SHARE = 0.2
"""Of long résumés, how many give their address only on the last page."""
MIXED_CASE_SHARE = 0.15
"""Of résumés, how many write their address in mixed case (`Ada.Lovelace.7@People.EXAMPLE`)."""


@dataclass(frozen=True)
class Block:
    kind: str
    """"title", "heading", "line" (never wrapped: contact lines) or "para"."""
    text: str


def producer_of(f: SampleFile) -> Producer:
    """Producers take turns by file number, so every corpus mixes all of them evenly."""
    return PRODUCERS[_index(f) % len(PRODUCERS)]


def _index(f: SampleFile) -> int:
    return int(f.name.removeprefix("resumes/")[:5])


def _sentence(rng: random.Random, words: int) -> str:
    out = [rng.choice(VERBS)]
    while len(out) < words:
        pick = rng.random()
        if pick < 0.25:
            out.append(rng.choice(LINKERS))
        elif pick < 0.35:
            out.append(rng.choice(SKILLS))
        else:
            out.append(rng.choice(FILLER))
    return " ".join(out) + "."


def _paragraph(rng: random.Random, words: int) -> str:
    sentences = []
    while words > 0:
        n = min(words, rng.randint(9, 22))
        sentences.append(_sentence(rng, n))
        words -= n
    return " ".join(sentences)


def plan_pages(f: SampleFile, density: Density, seed: int) -> list[list[Block]]:
    """The blocks of each page; the same file, density and seed always give the same plan."""
    rng = random.Random(seed * 1_000_003 + _index(f))
    first, last = _names(f, rng)
    pages = rng.randint(1, 2) if density is Density.TYPICAL else rng.randint(3, 5)
    late = density is Density.LONG and rng.random() < LAST_PAGE_SHARE
    contact = [rng.choice(CITIES), f"+1 555 {rng.randint(1000, 9999)}"]
    shown = _mixed_case(f.email) if f.email and rng.random() < MIXED_CASE_SHARE else f.email
    if shown and not late:
        contact.append(shown)
    contact.append(f"linkedin.example/in/{first}-{last}")
    plan: list[list[Block]] = []
    for number in range(1, pages + 1):
        blocks: list[Block] = []
        budget = rng.randint(600, 900)
        if number == 1:
            blocks += [
                Block("title", f"{first.title()} {last.title()}"),
                Block("line", rng.choice(TITLES)),
                Block("line", " | ".join(contact)),
                Block("heading", "Summary"),
            ]
        blocks += _page_body(rng, number, budget)
        if number == pages:
            blocks += [
                Block("heading", "Education"),
                Block("line", f"{rng.choice(DEGREES)}, {rng.choice(SCHOOLS)}"),
            ]
            if late and shown:
                blocks.append(Block("line", f"Contact: {shown}"))
        plan.append(blocks)
    return plan


def _names(f: SampleFile, rng: random.Random) -> tuple[str, str]:
    local = (f.email or "").partition("@")[0].split(".")
    if len(local) >= 2 and local[0].isalpha() and local[1].isalpha():
        return local[0], local[1]
    return rng.choice(FIRST), f.name.rsplit("-", 1)[-1].removesuffix(".pdf")


def _page_body(rng: random.Random, number: int, budget: int) -> list[Block]:
    blocks: list[Block] = [Block("heading", "Experience" if number == 1 else "Experience, cont.")]
    year = 2024 - 4 * number
    while budget > 0:
        start = year - rng.randint(1, 4)
        blocks.append(
            Block(
                "line",
                f"{rng.choice(TITLES)}, {rng.choice(COMPANIES)}, "
                f"{rng.choice(MONTHS)} {start} - {rng.choice(MONTHS)} {year}",
            )
        )
        words = min(budget, rng.randint(90, 160))
        blocks.append(Block("para", _paragraph(rng, words)))
        budget -= words + 8
        year = start
    return blocks


def render(f: SampleFile, density: Density, seed: int, producer: Producer | None = None) -> bytes:
    """The PDF of one file, by its producer (by default, the one its number picks)."""
    plan = plan_pages(f, density, seed)
    match producer or producer_of(f):
        case Producer.FPDF2:
            return _fpdf2(plan)
        case Producer.REPORTLAB:
            return _reportlab(plan)
        case Producer.TEXLIKE:
            return _texlike(plan)


STYLE = {"title": (18.0, 24.0), "heading": (11.0, 16.0), "line": (9.0, 12.0), "para": (9.0, 11.0)}
"""Font size and line height (points) of each block kind; about 60 lines of text a page."""


def _fpdf2(plan: list[list[Block]]) -> bytes:
    # Lines wrapped here: fpdf2's multi_cell costs ~100 ms a dense page in line breaking.
    pdf = FPDF(format="A4", unit="pt")
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_auto_page_break(auto=False)
    width = PAGE_W - 2 * MARGIN
    for blocks in plan:
        pdf.add_page()
        y = MARGIN
        for b in blocks:
            size, height = STYLE[b.kind]
            bold = b.kind in ("title", "heading")
            pdf.set_font("Helvetica", "B" if bold else "", size)
            for line in _wrap(b.text, "Helvetica-Bold" if bold else "Helvetica", size, width):
                if y > PAGE_H - MARGIN:
                    pdf.add_page()
                    y = MARGIN
                pdf.text(MARGIN, y + size, line)
                y += height
    return bytes(pdf.output())


def _reportlab(plan: list[list[Block]]) -> bytes:
    out = io.BytesIO()
    canvas = Canvas(out, pagesize=A4, invariant=True, pageCompression=1)
    width = PAGE_W - 2 * MARGIN
    for blocks in plan:
        y = PAGE_H - MARGIN
        for b in blocks:
            size, height = STYLE[b.kind]
            font = "Helvetica-Bold" if b.kind in ("title", "heading") else "Helvetica"
            for line in _wrap(b.text, font, size, width):
                if y < MARGIN:
                    canvas.showPage()
                    y = PAGE_H - MARGIN
                canvas.setFont(font, size)
                canvas.drawString(MARGIN, y, line)
                y -= height
        canvas.showPage()
    canvas.save()
    return out.getvalue()


def _wrap(text: str, font: str, size: float, width: float) -> list[str]:
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if line and stringWidth(candidate, font, size) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    return [*lines, line] if line else lines


TEX_FONTS = {"title": "Times-Bold", "heading": "Times-Bold", "line": "Times-Roman"}


def _texlike(plan: list[list[Block]]) -> bytes:
    """A PDF written object by object, its text set the way pdfTeX sets a justified paragraph."""
    rng = random.Random(len(plan))
    streams = []
    for blocks in plan:
        ops = []
        y = PAGE_H - MARGIN
        for b in blocks:
            size, height = STYLE[b.kind]
            font = TEX_FONTS.get(b.kind, "Times-Roman")
            tag = "/F2" if font == "Times-Bold" else "/F1"
            lines = _wrap(b.text, font, size, PAGE_W - 2 * MARGIN)
            for i, line in enumerate(lines):
                justify = b.kind == "para" and i < len(lines) - 1
                tj = _tj_line(line, font, size, justify, rng)
                ops.append(f"BT {tag} {size:g} Tf 1 0 0 1 {MARGIN:g} {y:.2f} Tm {tj} TJ ET")
                y -= height
                if y < MARGIN:
                    streams.append("\n".join(ops))
                    ops, y = [], PAGE_H - MARGIN
        streams.append("\n".join(ops))
    return _assemble(streams)


def _tj_line(line: str, font: str, size: float, justify: bool, rng: random.Random) -> str:
    """One line as a TJ array: word gaps as offsets (stretched to the measure when
    justified), a small kern now and then inside a word, as TeX's font metrics put them."""
    words = line.split()
    gap = stringWidth(" ", font, 1000)
    if justify and len(words) > 1:
        natural = sum(stringWidth(w, font, size) for w in words)
        gap = (PAGE_W - 2 * MARGIN - natural) / (len(words) - 1) * 1000 / size
    parts = []
    for j, word in enumerate(words):
        if j:
            parts.append(f"{-gap:.1f}")
        cut = rng.randrange(1, len(word)) if len(word) > 3 and rng.random() < 0.3 else 0
        if cut:
            kern = str(rng.choice((-15, 18, 27)))
            parts += [_pdf_string(word[:cut]), kern, _pdf_string(word[cut:])]
        else:
            parts.append(_pdf_string(word))
    return "[" + " ".join(parts) + "]"


def _pdf_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return "(" + escaped.encode("cp1252", "replace").decode("latin-1") + ")"


def _assemble(streams: list[str]) -> bytes:
    n = len(streams)
    kids = " ".join(f"{5 + 2 * i} 0 R" for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Times-Roman /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Times-Bold /Encoding /WinAnsiEncoding >>",
    ]
    for i, text in enumerate(streams):
        body = zlib.compress(text.encode("latin-1"), 6)
        page = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {PAGE_W:.0f} {PAGE_H:.0f}]"
            f" /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents {6 + 2 * i} 0 R >>"
        )
        objects.append(page.encode())
        objects.append(
            f"<< /Length {len(body)} /Filter /FlateDecode >>\nstream\n".encode()
            + body
            + b"\nendstream"
        )
    return assemble(objects, header=b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
