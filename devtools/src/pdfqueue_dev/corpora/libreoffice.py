"""The libreoffice corpus: résumés written as documents and converted by headless LibreOffice."""

from __future__ import annotations

import functools
import hashlib
import os
import random
import shutil
import subprocess
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pdfqueue_dev.corpora.documents import _paragraph
from pdfqueue_dev.corpora.samples import (
    CITIES,
    CLEAN,
    COMPANIES,
    DEGREES,
    FIRST,
    MONTHS,
    SCHOOLS,
    SKILLS,
    TITLES,
    Corpus,
    SampleFile,
    build_corpus,
    member_info,
)

FONTS = ("Liberation Serif", "Liberation Sans", "DejaVu Sans", "DejaVu Serif", "Carlito", "Caladea")
LAYOUTS = ("single", "columns", "sidebar", "html")
"""One column; two columns (a section); a two-cell table, contact in the narrow left cell;
an HTML page (LibreOffice's Writer/Web import, another export path)."""
HYPHENATED_SHARE = 0.5
"""Of the ODT résumés, how many have automatic hyphenation on (and justified paragraphs)."""
SOFT_HYPHEN_SHARE = 0.15
"""Of résumés, how many carry a typed soft hyphen (U+00AD) inside the address in running
text, as text pasted from a web page does."""
LINKED_SHARE = 0.5
"""Of résumés, how many make the contact line's address a `mailto:` link (the rest write it)."""
LINK_ONLY_SHARE = 0.15
"""Of linked résumés, how many show the address only as a link whose text is no address."""
BATCH = 200
"""Documents per soffice process: one process converts many, and a failure costs one batch."""
CONVERT_TIMEOUT_S = 1800
IMPORTS = {
    ".fodt": ((), "pdf"),
    # Writer/Web (what an .html opens in) exported the first block of every page as a blank
    # page in LibreOffice 7.4: import HTML into Writer itself, as "Open in Writer" does.
    ".html": (("--infilter=HTML (StarWriter)",), "pdf:writer_pdf_Export"),
}
"""How soffice opens and exports each kind of document (one soffice call per kind)."""


@dataclass(frozen=True)
class Source:
    """One document to convert: its file suffix and its text."""

    suffix: str
    text: str

    @property
    def key(self) -> str:
        return hashlib.sha256(self.suffix.encode() + b"\0" + self.text.encode()).hexdigest()[:32]


def soffice() -> str:
    found = shutil.which("soffice")
    if not found:
        raise RuntimeError(
            "no soffice: `bash tools/services.sh libreoffice` installs it (make bench does)"
        )
    return found


@functools.cache
def producer_version() -> str:
    """LibreOffice's version: part of every cache key, since it is what wrote the PDFs."""
    out = subprocess.run([soffice(), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def corpus(n: int, seed: int, cache: Path) -> tuple[Corpus, Path]:
    """A CLEAN corpus (every PDF names a known user) converted by LibreOffice, and its ZIP.
    Each PDF is cached by its document and LibreOffice's version: a rerun converts nothing."""
    planned = build_corpus(n, seed=seed, mix=CLEAN)
    sources = [source(f, seed) for f in planned.files]
    version = producer_version()
    names = hashlib.sha256(
        "\n".join(f"{f.name} {s.key}" for f, s in zip(planned.files, sources, strict=True)).encode()
        + version.encode()
    ).hexdigest()[:12]
    path = cache / f"libreoffice-{n}-seed{seed}-{names}.zip"
    if not path.exists():
        pdfs = convert(sources, cache, version)
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for f, s in zip(planned.files, sources, strict=True):
                zf.writestr(member_info(f.name), pdfs[s.key].read_bytes())
        tmp.replace(path)
        print(f"  wrote {path} ({n} PDFs)")
    return planned, path


def pdf_bytes(f: SampleFile, seed: int, cache: Path) -> bytes:
    """One file of the corpus, as `corpus` writes it into the ZIP."""
    s = source(f, seed)
    return convert([s], cache, producer_version())[s.key].read_bytes()


def convert(sources: list[Source], cache: Path, version: str) -> dict[str, Path]:
    """The PDF of each source, converting only those not cached yet."""
    tag = hashlib.sha256(version.encode()).hexdigest()[:8]
    folder = cache / f"libreoffice-pdf-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    out = {s.key: folder / f"{s.key}.pdf" for s in sources}
    missing = list({s.key: s for s in sources if not out[s.key].exists()}.values())
    started = time.monotonic()
    batches = [missing[i : i + BATCH] for i in range(0, len(missing), BATCH)]
    done = 0
    # soffice lays out on one thread: one process per core converts in a fraction of the time.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for n in pool.map(lambda b: _convert_batch(b, folder), batches):
            done += n
            print(
                f"  LibreOffice converted {done}/{len(missing)} documents"
                f" in {time.monotonic() - started:.0f}s",
                flush=True,
            )
    lost = [k for k, p in out.items() if not p.exists()]
    if lost:
        raise RuntimeError(f"LibreOffice wrote no PDF for {len(lost)} documents, e.g. {lost[0]}")
    return out


def _convert_batch(batch: list[Source], folder: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="pdfqueue-lo-") as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        for s in batch:
            (work / "in" / f"{s.key}{s.suffix}").write_text(s.text, encoding="utf-8")
        # A profile of its own: never the user's, and no lock shared with another soffice.
        base = [soffice(), f"-env:UserInstallation={(work / 'profile').as_uri()}", "--headless"]
        for suffix, (infilter, target) in IMPORTS.items():
            inputs = sorted(str(p) for p in (work / "in").glob(f"*{suffix}"))
            if inputs:
                argv = [*base, "--norestore", *infilter, "--convert-to", target]
                argv += ["--outdir", str(work / "out"), *inputs]
                done = subprocess.run(
                    argv, check=False, capture_output=True, timeout=CONVERT_TIMEOUT_S
                )
                if done.returncode:
                    raise RuntimeError(f"soffice failed: {done.stderr.decode()[-2000:]}")
        for pdf in (work / "out").glob("*.pdf"):
            shutil.move(pdf, folder / pdf.name)
    return len(batch)


# --- the documents ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resume:
    """What one résumé says, whatever its layout."""

    name: str
    title: str
    email: str
    phone: str
    city: str
    summary: str
    jobs: list[tuple[str, str]]
    """(heading, paragraph) of each position, in order."""
    skills: list[str]
    education: str
    pages: int
    linked: bool
    link_only: bool
    soft_hyphen: bool


def resume(f: SampleFile, seed: int) -> Resume:
    """The content of one file; the same file and seed always give the same résumé."""
    rng = random.Random(seed * 7_000_003 + int(f.name.removeprefix("resumes/")[:5]))
    email = f.email or ""
    local = email.partition("@")[0].split(".")
    first = local[0] if local and local[0].isalpha() else rng.choice(FIRST)
    last = local[1] if len(local) > 1 and local[1].isalpha() else "smith"
    pages = rng.choice((1, 1, 2, 2, 3))
    jobs = []
    year = 2025
    # About 5,000 characters on page one, and as much again on each page after it.
    for _ in range((3, 6, 9)[pages - 1]):
        start = year - rng.randint(1, 4)
        heading = (
            f"{rng.choice(TITLES)}, {rng.choice(COMPANIES)}, "
            f"{rng.choice(MONTHS)} {start} - {rng.choice(MONTHS)} {year}"
        )
        jobs.append((heading, _paragraph(rng, rng.randint(120, 160))))
        year = start
    linked = rng.random() < LINKED_SHARE
    return Resume(
        name=f"{first.title()} {last.title()}",
        title=rng.choice(TITLES),
        email=email,
        phone=f"+1 555 {rng.randint(1000, 9999)}",
        city=rng.choice(CITIES),
        summary=_paragraph(rng, rng.randint(70, 100)),
        jobs=jobs,
        skills=rng.sample(SKILLS, 6),
        education=f"{rng.choice(DEGREES)}, {rng.choice(SCHOOLS)}",
        pages=pages,
        linked=linked,
        link_only=linked and rng.random() < LINK_ONLY_SHARE,
        soft_hyphen=rng.random() < SOFT_HYPHEN_SHARE,
    )


def source(f: SampleFile, seed: int) -> Source:
    """The document of one file, in the layout, font and hyphenation its number picks."""
    r = resume(f, seed)
    rng = random.Random(seed * 9_000_011 + int(f.name.removeprefix("resumes/")[:5]))
    layout = rng.choice(LAYOUTS)
    font = rng.choice(FONTS)
    size = rng.choice((9.0, 9.5, 10.0))
    if layout == "html":
        return Source(".html", _html(r, font, size - 0.5))
    hyphenate = rng.random() < HYPHENATED_SHARE
    return Source(".fodt", _fodt(r, layout, font, size, hyphenate=hyphenate))


def _soft(address: str) -> str:
    """The address with a typed soft hyphen in its local part (between two letters)."""
    local, _, domain = address.partition("@")
    for i in range(2, len(local) - 1):
        if local[i - 1].isalpha() and local[i].isalpha():
            return f"{local[:i]}\u00ad{local[i:]}@{domain}"
    return address


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _prose_contact(r: Resume) -> str:
    """A sentence of running text that gives the address, where hyphenation may split it."""
    shown = _soft(r.email) if r.soft_hyphen else r.email
    return (
        f"I am based in {r.city} and open to relocation; the quickest way to reach me about"
        f" a role is an email to {shown} or a call on {r.phone} during office hours."
    )


# --- flat ODT ------------------------------------------------------------------------------------

_FODT_HEAD = """<?xml version="1.0" encoding="UTF-8"?>
<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"
 xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0"
 xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"
 xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"
 xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
 xmlns:xlink="http://www.w3.org/1999/xlink"
 xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"
 office:version="1.3" office:mimetype="application/vnd.oasis.opendocument.text">
"""


def _fodt(r: Resume, layout: str, font: str, size: float, *, hyphenate: bool) -> str:
    align = "justify" if hyphenate else "start"
    hyph = 'fo:hyphenate="true" fo:hyphenation-remain-char-count="2" ' if hyphenate else ""
    hyph += 'fo:hyphenation-push-char-count="2" ' if hyphenate else ""
    lang = 'fo:language="en" fo:country="US"'
    text_props = f'style:font-name="{font}" fo:font-size="{size}pt" {lang} {hyph}'
    styles = f"""<office:font-face-decls><style:font-face style:name="{font}"
 svg:font-family="'{font}'"/></office:font-face-decls>
<office:styles>
<style:default-style style:family="paragraph"><style:paragraph-properties
 fo:margin-bottom="0.12cm"/><style:text-properties {text_props}/></style:default-style>
<style:style style:name="Body" style:family="paragraph"><style:paragraph-properties
 fo:text-align="{align}"/><style:text-properties {text_props}/></style:style>
<style:style style:name="Name" style:family="paragraph"><style:text-properties
 style:font-name="{font}" fo:font-size="{size + 9}pt" fo:font-weight="bold"/></style:style>
<style:style style:name="Heading" style:family="paragraph"><style:paragraph-properties
 fo:margin-top="0.25cm"/><style:text-properties style:font-name="{font}"
 fo:font-size="{size + 1.5}pt" fo:font-weight="bold"/></style:style>
<style:style style:name="Small" style:family="paragraph"><style:text-properties
 style:font-name="{font}" fo:font-size="{size - 1.5}pt" {lang}/></style:style>
</office:styles>
<office:automatic-styles>
<style:page-layout style:name="pm1"><style:page-layout-properties fo:page-width="21cm"
 fo:page-height="29.7cm" fo:margin-top="1.2cm" fo:margin-bottom="1.0cm" fo:margin-left="1.6cm"
 fo:margin-right="1.6cm"/><style:header-style><style:header-footer-properties
 fo:min-height="0cm" fo:margin-bottom="0.3cm"/></style:header-style><style:footer-style>
<style:header-footer-properties fo:min-height="0cm" fo:margin-top="0.3cm"/></style:footer-style>
</style:page-layout>
<style:style style:name="Sect1" style:family="section"><style:section-properties>
<style:columns fo:column-count="2" fo:column-gap="0.7cm"/></style:section-properties></style:style>
<style:style style:name="Tab" style:family="table"><style:table-properties style:width="17.8cm"
 table:align="margins"/></style:style>
<style:style style:name="ColA" style:family="table-column"><style:table-column-properties
 style:column-width="5cm"/></style:style>
<style:style style:name="ColB" style:family="table-column"><style:table-column-properties
 style:column-width="12.8cm"/></style:style>
</office:automatic-styles>
"""
    contact = f"{_esc(r.city)} | {_esc(r.phone)} | " + _email_fodt(r)
    master = f"""<office:master-styles><style:master-page style:name="Standard"
 style:page-layout-name="pm1"><style:header><text:p text:style-name="Small">{_esc(r.name)},
 {_esc(r.title)}</text:p></style:header><style:footer><text:p text:style-name="Small">{contact}
</text:p></style:footer></style:master-page></office:master-styles>
"""
    body = _fodt_body(r, layout, contact)
    body = f"<office:body><office:text>{body}</office:text></office:body>"
    return f"{_FODT_HEAD}{styles}{master}{body}\n</office:document>\n"


def _email_fodt(r: Resume) -> str:
    """The address as text, or as a mailto link (its text the address, or `Email me`)."""
    if not r.linked:
        return _esc(r.email)
    shown = "Email me" if r.link_only else _esc(r.email)
    return f'<text:a xlink:type="simple" xlink:href="mailto:{r.email}">{shown}</text:a>'


def _p(style: str, text: str) -> str:
    return f'<text:p text:style-name="{style}">{text}</text:p>\n'


def _fodt_body(r: Resume, layout: str, contact: str) -> str:
    head = _p("Name", _esc(r.name)) + _p("Body", f"{_esc(r.title)} | {contact}")
    summary = _p("Heading", "Summary") + _p("Body", _esc(r.summary))
    if not r.link_only:
        summary += _p("Body", _esc(_prose_contact(r)))
    jobs = _fodt_jobs(r)
    skills = _p("Heading", "Skills") + _p("Body", _esc(", ".join(r.skills)))
    education = _p("Heading", "Education") + _p("Body", _esc(r.education))
    if layout == "columns":
        section = (
            f'<text:section text:style-name="Sect1" text:name="Body">{summary}{jobs}</text:section>'
        )
        return head + section + skills + education
    if layout == "sidebar":
        side = _p("Heading", "Contact") + _p("Body", _esc(r.city)) + _p("Body", _esc(r.phone))
        side += _p("Body", _email_fodt(r)) + skills + education
        row = (
            f"<table:table-row><table:table-cell>{side}</table:table-cell>"
            f"<table:table-cell>{summary}{jobs}</table:table-cell></table:table-row>"
        )
        table = (
            '<table:table table:name="Resume" table:style-name="Tab">'
            '<table:table-column table:style-name="ColA"/>'
            f'<table:table-column table:style-name="ColB"/>{row}</table:table>'
        )
        return _p("Name", _esc(r.name)) + _p("Body", _esc(r.title)) + table
    return head + summary + jobs + skills + education


def _fodt_jobs(r: Resume) -> str:
    out = [_p("Heading", "Experience")]
    for heading, para in r.jobs:
        out.append(_p("Body", f"<text:span>{_esc(heading)}</text:span>"))
        out.append(_p("Body", _esc(para)))
    return "".join(out)


# --- HTML --------------------------------------------------------------------------------------


def _html(r: Resume, font: str, size: float) -> str:
    link = "Email me" if r.link_only else _esc(r.email)
    mail = f'<a href="mailto:{r.email}">{link}</a>' if r.linked else _esc(r.email)
    contact = f"{_esc(r.city)} &middot; {_esc(r.phone)} &middot; {mail}"
    jobs = "".join(f"<h3>{_esc(h)}</h3><p>{_esc(p)}</p>" for h, p in r.jobs)
    prose = "" if r.link_only else f"<p>{_esc(_prose_contact(r))}</p>"
    skills = "".join(f"<td>{_esc(s)}</td>" for s in r.skills)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(r.name)}</title>
<style>@page {{ margin: 1.5cm; }} body {{ font-family: '{font}'; font-size: {size}pt; }}
h1 {{ font-size: {size + 9}pt; margin: 0; }} h2 {{ font-size: {size + 2}pt; }}
h3 {{ font-size: {size}pt; margin-bottom: 0; }} p {{ margin-top: 2pt; }}</style></head>
<body><h1>{_esc(r.name)}</h1><p>{_esc(r.title)}<br>{contact}</p>
<h2>Summary</h2><p>{_esc(r.summary)}</p>{prose}
<h2>Experience</h2>{jobs}
<h2>Skills</h2><table border="1" cellpadding="3"><tr>{skills}</tr></table>
<h2>Education</h2><p>{_esc(r.education)}</p></body></html>
"""
