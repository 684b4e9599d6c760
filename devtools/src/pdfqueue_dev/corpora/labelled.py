"""A labelled résumé corpus for extraction: every way an address hides, each with its owner."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pypdfium2 as pdfium
from fpdf import FPDF
from PIL import Image, ImageEnhance, ImageFilter
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen.canvas import Canvas

from pdfqueue_dev.corpora.rawpdf import assemble
from pdfqueue_dev.corpora.samples import CITIES, COMPANIES, FIRST, FIXED_DATE, LAST, TITLES

DOMAIN = "people.example"
FILLER = (
    "Led the migration of billing services to a new platform, cut latency by a third and"
    " mentored four engineers. Designed data pipelines, wrote the runbooks and ran the on-call"
    " rotation. Worked with product and support on the roadmap for two years."
)


@dataclass(frozen=True)
class User:
    id: int
    email: str


@dataclass(frozen=True)
class Labelled:
    """One file of the corpus and what linking it must do."""

    name: str
    mode: str
    """The failure mode it exercises (`plain`, `mailto_only`, `scan_300_rotated`, ...)."""
    layer: str
    """`text` (a text layer to read) or `scan` (OCR needed)."""
    owner: int | None
    """The user it must link to; None: it must link to nobody."""
    ambiguous: bool = False
    """It names two users where the owner's belongs: `skipped_ambiguous`."""


Builder = Callable[["Person", random.Random], tuple[bytes, int | None, bool]]


@dataclass(frozen=True)
class Person:
    first: str
    last: str
    user: User
    other: User
    """A second user (a referee, a colleague) some files name too."""

    @property
    def name(self) -> str:
        return f"{self.first.title()} {self.last.title()}"


# --- producers ------------------------------------------------------------------------------


def fpdf_doc(blocks: list[str], *, footer: str = "", links: tuple[str, ...] = ()) -> bytes:
    """fpdf2: one line or paragraph per block, an optional footer on every page, and link
    annotations (`mailto:`) on an envelope-like box at the top right."""
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_auto_page_break(auto=True, margin=20)
    if footer:
        pdf.footer = lambda: _footer(pdf, footer)  # type: ignore[method-assign]
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    for uri in links:
        pdf.rect(180, 12, 8, 6)
        pdf.link(180, 12, 8, 6, uri)
    for block in blocks:
        if block == "\f":
            pdf.add_page()
            continue
        pdf.multi_cell(0, 5.5, block, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


def _footer(pdf: FPDF, text: str) -> None:
    pdf.set_y(-15)
    pdf.set_font("Helvetica", size=8)
    pdf.cell(0, 8, text, align="C")


def reportlab_columns(sidebar: list[str], main: list[str]) -> bytes:
    """reportlab: a two-column page, a narrow sidebar (contact) left of the main text."""
    buf = io.BytesIO()
    canvas = Canvas(buf, pagesize=A4, invariant=True)
    canvas.setFont("Helvetica", 9)
    _, height = A4
    for i, line in enumerate(sidebar):
        canvas.drawString(36, height - 60 - 13 * i, line)
    for i, line in enumerate(main):
        canvas.drawString(230, height - 60 - 13 * i, line)
    canvas.showPage()
    canvas.save()
    return buf.getvalue()


def layer_pdf(lines: list[str]) -> bytes:
    """A page whose text layer is exactly `lines` (any Unicode: ligatures, soft hyphens,
    zero-width and private-use characters), through a ToUnicode map; glyphs are Helvetica's
    for arbitrary codes, as in PDFs whose fonts were subset and re-encoded."""
    codes: dict[str, int] = {}
    for ch in "".join(lines):
        if ch not in codes:
            codes[ch] = 0x21 + len(codes)
    if len(codes) > 0xDE:
        raise ValueError("too many distinct characters for one simple font")
    shown = ["".join(f"{codes[ch]:02X}" for ch in line) for line in lines]
    cmap = {code: _utf16(ch) for ch, code in codes.items()}
    return _raw_pdf(shown, cmap)


def broken_pdf(lines: list[str], garbage: Callable[[int], str]) -> bytes:
    """A page that shows `lines` (ASCII, drawn correctly) but whose ToUnicode map sends each
    code to `garbage(code)` (U+FFFD, a private-use glyph): text a parser cannot use."""
    shown = [line.encode("latin-1").hex().upper() for line in lines]
    used = {b for line in lines for b in line.encode("latin-1")}
    return _raw_pdf(shown, {code: _utf16(garbage(code)) for code in used})


def _utf16(text: str) -> str:
    return text.encode("utf-16-be").hex().upper()


def _raw_pdf(hex_lines: list[str], cmap: dict[int, str]) -> bytes:
    ops = ["BT /F1 11 Tf 14 TL 56 780 Td"]
    ops += [f"<{line}> Tj T*" for line in hex_lines]
    ops.append("ET")
    content = zlib.compress("\n".join(ops).encode())
    entries = "\n".join(f"<{code:02X}> <{uni}>" for code, uni in sorted(cmap.items()))
    tounicode = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        "/CMapName /Custom def /CMapType 2 def\n"
        "1 begincodespacerange <00> <FF> endcodespacerange\n"
        f"{len(cmap)} beginbfchar\n{entries}\nendbfchar\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end"
    ).encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842]"
        b" /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content)
        + content
        + b"\nendstream",
        b"<< /Length %d >>\nstream\n" % len(tounicode) + tounicode + b"\nendstream",
    ]
    return assemble(objs)


@dataclass(frozen=True)
class ScanStyle:
    dpi: int = 300
    angle: float = 0.0
    contrast: float = 1.0
    jpeg_quality: int = 85
    noise: bool = False


def scan(pdf: bytes, style: ScanStyle, rng: random.Random) -> bytes:
    """The first page of `pdf` as a scanner would give it: an image at `style.dpi`, turned
    a little, faded, noisy, JPEG-compressed, alone on a page."""
    document = pdfium.PdfDocument(pdf)
    try:
        image = document[0].render(scale=style.dpi / 72, grayscale=True).to_pil().convert("L")
    finally:
        document.close()
    if style.angle:
        image = image.rotate(style.angle, resample=Image.Resampling.BICUBIC, fillcolor=255)
    if style.contrast != 1.0:
        image = ImageEnhance.Contrast(image).enhance(style.contrast)
        image = ImageEnhance.Brightness(image).enhance(1.1)
    if style.noise:
        noise = Image.effect_noise(image.size, 24).convert("L")
        image = Image.blend(image, noise, 0.12).filter(ImageFilter.SMOOTH)
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=style.jpeg_quality)
    out = FPDF(format="A4")
    out.set_creation_date(FIXED_DATE)
    out.add_page()
    out.image(io.BytesIO(buf.getvalue()), x=0, y=0, w=210, h=297)
    del rng
    return bytes(out.output())


# --- the failure modes ----------------------------------------------------------------------


def _head(p: Person, rng: random.Random, contact: str) -> list[str]:
    return [
        p.name,
        rng.choice(TITLES),
        f"{rng.choice(CITIES)} | +1 555 {rng.randint(1000, 9999)} | {contact}",
        "Experience",
        f"{rng.choice(TITLES)}, {rng.choice(COMPANIES)}, 2019 - 2024",
        FILLER,
    ]


def plain(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    return fpdf_doc(_head(p, rng, p.user.email)), p.user.id, False


def mixed_case(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    local, _, domain = p.user.email.partition("@")
    shown = ".".join(part.capitalize() for part in local.split(".")) + "@" + domain.upper()
    return fpdf_doc(_head(p, rng, shown)), p.user.id, False


def mailto_only(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """The address exists only behind an envelope icon's link."""
    uri = f"mailto:{p.user.email}?subject=Hello"
    return fpdf_doc(_head(p, rng, "Email me"), links=(uri,)), p.user.id, False


def ligature(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """`fi`/`ff`/`fl` as one glyph in the text layer (the users are made to contain them)."""
    shown = p.user.email.replace("fi", "\ufb01").replace("ff", "\ufb00").replace("fl", "\ufb02")
    return layer_pdf([p.name, f"Email: {shown}", "Phone +1 555 0100"]), p.user.id, False


def invisible(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """Soft hyphens, zero-width characters and a BOM inside the address."""
    local, _, domain = p.user.email.partition("@")
    mark = rng.choice(["\u00ad", "\u200b", "\u200c", "\u2060", "\ufeff"])
    shown = local[:3] + mark + local[3:] + "@" + domain.replace(".", mark + ".", 1)
    return layer_pdf([p.name, f"Contact {shown}", "Berlin"]), p.user.id, False


def icon_glued(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """An icon font's private-use glyph glued to the address (`\\uf0e0jane@...`)."""
    icon = chr(rng.choice([0xF0E0, 0xE0E1, 0xF003, 0xE158]))
    return layer_pdf([p.name, f"{icon}{p.user.email}  {chr(0xF095)}+1 555 0100"]), p.user.id, False


def split_hyphen(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """Split at a line end after a hyphen the address has (kept) or does not have."""
    local, _, domain = p.user.email.partition("@")
    cut = rng.randint(2, len(local) - 1)
    lines = [p.name, f"Email: {local[:cut]}-", f"{local[cut:]}@{domain}", "Phone +1 555 0100"]
    return layer_pdf(lines), p.user.id, False


def split_domain(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """Split inside the domain, no hyphen (a narrow table cell)."""
    local, _, domain = p.user.email.partition("@")
    cut = rng.randint(1, len(domain) - 9)  # never inside `.example`
    lines = [p.name, f"Mail {local}@{domain[:cut]}", f"{domain[cut:]} | Berlin"]
    return layer_pdf(lines), p.user.id, False


def obfuscated(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    local, _, domain = p.user.email.partition("@")
    name, _, tld = domain.rpartition(".")
    shown = rng.choice(
        [
            f"{local} [at] {name} [dot] {tld}",
            f"{local}(at){domain}",
            f"{local} (AT) {name} (DOT) {tld}",
            f"{local} at {name} dot {tld}",
            f"{local} @ {domain}",
        ]
    )
    return fpdf_doc(_head(p, rng, shown)), p.user.id, False


def two_columns(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    sidebar = [p.name, "Contact", rng.choice(CITIES), p.user.email, "+1 555 0100", "Skills"]
    main = ["Experience", *[FILLER[i : i + 60] for i in range(0, len(FILLER), 60)]]
    return reportlab_columns(sidebar, main), p.user.id, False


def footer(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    blocks = _head(p, rng, "references on request")
    text = f"{p.name} - {p.user.email} - page 1"
    return fpdf_doc(blocks, footer=text), p.user.id, False


def later_page(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    blocks = [*_head(p, rng, "see the last page"), "\f", "Contact", p.user.email]
    return fpdf_doc(blocks), p.user.id, False


def decoy(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """A recruiter's address (nobody's) before the owner's."""
    blocks = [
        f"Referred by jobs@{rng.choice(COMPANIES).lower()}.example",
        *_head(p, rng, p.user.email),
    ]
    return fpdf_doc(blocks), p.user.id, False


def reference(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """The owner in the header, another user far below as a referee: the owner links."""
    blocks = [*_head(p, rng, p.user.email), *[FILLER] * 12, f"References: {p.other.email}"]
    return fpdf_doc(blocks), p.user.id, False


def ambiguous(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """Two users in the contact line: no guess."""
    return fpdf_doc(_head(p, rng, f"{p.user.email} / {p.other.email}")), None, True


def placeholder(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    """A template never filled in: its placeholder address is nobody's, whoever has it."""
    address = rng.choice(["hello@reallygreatsite.com", "email@example.com", "you@yourdomain.com"])
    return fpdf_doc(_head(p, rng, address)), None, False


def placeholder_and_owner(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    blocks = [*_head(p, rng, p.user.email), "Template by hello@reallygreatsite.com"]
    return fpdf_doc(blocks), p.user.id, False


def unknown(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    return fpdf_doc(_head(p, rng, f"{p.first}@nobody.example")), None, False


def no_email(p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    return fpdf_doc(_head(p, rng, "linkedin.example/in/someone")), None, False


TEXT_MODES: dict[str, Builder] = {
    "plain": plain,
    "mixed_case": mixed_case,
    "mailto_only": mailto_only,
    "ligature": ligature,
    "invisible": invisible,
    "icon_glued": icon_glued,
    "split_hyphen": split_hyphen,
    "split_domain": split_domain,
    "obfuscated": obfuscated,
    "two_columns": two_columns,
    "footer": footer,
    "later_page": later_page,
    "decoy": decoy,
    "reference": reference,
    "ambiguous": ambiguous,
    "placeholder": placeholder,
    "placeholder_and_owner": placeholder_and_owner,
    "unknown": unknown,
    "no_email": no_email,
}
SCAN_STYLES: dict[str, ScanStyle] = {
    "scan_300": ScanStyle(),
    "scan_150": ScanStyle(dpi=150),
    "scan_300_rotated": ScanStyle(angle=2.0),
    "scan_300_rotated_left": ScanStyle(angle=-1.5),
    "scan_300_faint": ScanStyle(contrast=0.45),
    "scan_300_noisy": ScanStyle(jpeg_quality=40, noise=True),
    "scan_150_noisy": ScanStyle(dpi=150, jpeg_quality=50, noise=True),
}
"""Clean scans (the 95 % target) are every style but the noisy and 150 DPI noisy ones."""
BROKEN_LAYER = "broken_layer"
"""Shown right, but the text layer is private-use glyphs: OCR reads it."""


def build(
    per_text_mode: int, per_scan_style: int, seed: int
) -> tuple[list[User], list[tuple[Labelled, bytes]]]:
    """The users and the files: `per_text_mode` of each text mode, `per_scan_style` scans of
    each style and as many broken text layers."""
    rng = random.Random(seed)
    plan = [(m, "text") for m in TEXT_MODES for _ in range(per_text_mode)]
    plan += [(s, "scan") for s in SCAN_STYLES for _ in range(per_scan_style)]
    plan += [(BROKEN_LAYER, "scan")] * per_scan_style
    users: list[User] = []
    files: list[tuple[Labelled, bytes]] = []
    for index, (mode, layer) in enumerate(plan):
        person = _person(rng, index, users, mode)
        pdf, owner, is_ambiguous = _render(mode, person, random.Random(seed * 7919 + index))
        name = f"{index:04d}-{mode}.pdf"
        files.append((Labelled(name, mode, layer, owner, is_ambiguous), pdf))
    return users, files


def _person(rng: random.Random, index: int, users: list[User], mode: str) -> Person:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    if mode == "ligature":
        first = rng.choice(["fiona", "griffin", "florence", "raffi"])
    user = User(2 * index + 1, f"{first}.{last}.{index}@{DOMAIN}")
    other = User(2 * index + 2, f"{rng.choice(FIRST)}.{rng.choice(LAST)}.r{index}@{DOMAIN}")
    users += [user, other]
    return Person(first, last, user, other)


def _render(mode: str, p: Person, rng: random.Random) -> tuple[bytes, int | None, bool]:
    if mode in TEXT_MODES:
        return TEXT_MODES[mode](p, rng)
    if mode == BROKEN_LAYER:
        lines = [p.name, f"Email: {p.user.email}", "Phone +1 555 0100", "Experience"]
        return broken_pdf(lines, lambda code: chr(0xE000 + code)), p.user.id, False
    source = fpdf_doc(_head(p, rng, p.user.email))
    return scan(source, SCAN_STYLES[mode], rng), p.user.id, False


# --- cache ----------------------------------------------------------------------------------


def cached(
    per_text_mode: int, per_scan_style: int, seed: int, root: Path | None = None
) -> tuple[list[User], list[tuple[Labelled, bytes]]]:
    """`build`, kept on disk under a name hashed from this module's source and the
    arguments: a rerun reads the files instead of making them again."""
    key = hashlib.sha256(
        Path(__file__).read_bytes() + f"{per_text_mode}/{per_scan_style}/{seed}".encode()
    ).hexdigest()[:16]
    folder = (root or Path(tempfile.gettempdir())) / f"pdfqueue-labelled-{key}"
    index = folder / "index.json"
    if index.is_file():
        meta = json.loads(index.read_text())
        users = [User(**u) for u in meta["users"]]
        files = [(Labelled(**f), (folder / f["name"]).read_bytes()) for f in meta["files"]]
        return users, files
    users, files = build(per_text_mode, per_scan_style, seed)
    partial = folder.with_name(folder.name + f".{random.getrandbits(32):08x}")
    partial.mkdir(parents=True)
    for label, pdf in files:
        (partial / label.name).write_bytes(pdf)
    meta = {"users": [asdict(u) for u in users], "files": [asdict(f) for f, _ in files]}
    (partial / "index.json").write_text(json.dumps(meta))
    try:
        partial.rename(folder)  # whole or not at all, even with two runs at once
    except OSError:  # another run finished first: its copy is as good
        shutil.rmtree(partial, ignore_errors=True)
    return users, files
