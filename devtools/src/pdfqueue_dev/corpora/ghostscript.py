"""The ghostscript corpus: typical résumés as PostScript programs, written as PDF by `ps2pdf`."""

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
from pathlib import Path

from pdfqueue_dev.corpora.documents import MARGIN, PAGE_H, PAGE_W, STYLE, Density, _wrap, plan_pages
from pdfqueue_dev.corpora.samples import CLEAN, Corpus, SampleFile, build_corpus, member_info

SOFT_HYPHEN_SHARE = 0.15
"""Of résumés, how many carry a typed soft hyphen inside the address. ISOLatin1Encoding draws
0xAD as a hyphen, so the text layer shows `jo-hn.smith@` for `john.smith@`: what the worker's
dehyphenated candidates are for."""
FONTS = {"Times-Roman": "Times-Bold", "Helvetica": "Helvetica-Bold"}
CONVERT_TIMEOUT_S = 120
_PROLOGUE = """%!PS-Adobe-3.0
%%Creator: pdfqueue bench
/latin1 { findfont dup length dict begin { 1 index /FID ne { def } { pop pop } ifelse } forall
  /Encoding ISOLatin1Encoding def currentdict end definefont pop } def
/R /{regular} latin1 /B /{bold} latin1
"""


def ps2pdf() -> str:
    found = shutil.which("ps2pdf")
    if not found:
        raise RuntimeError(
            "no ps2pdf: `bash tools/services.sh ghostscript` installs it (make bench does)"
        )
    return found


@functools.cache
def producer_version() -> str:
    """Ghostscript's version: part of every cache key, since it is what wrote the PDFs."""
    out = subprocess.run(["gs", "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def corpus(n: int, seed: int, cache: Path) -> tuple[Corpus, Path]:
    """A CLEAN corpus (every PDF names a known user) written by Ghostscript, and its ZIP;
    each PDF cached by its program and Ghostscript's version."""
    planned = build_corpus(n, seed=seed, mix=CLEAN)
    programs = [program(f, seed) for f in planned.files]
    keys = [_key(p) for p in programs]
    names = hashlib.sha256("\n".join(keys).encode() + producer_version().encode()).hexdigest()
    path = cache / f"ghostscript-{n}-seed{seed}-{names[:12]}.zip"
    if not path.exists():
        pdfs = convert(programs, cache)
        tmp = path.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for f, key in zip(planned.files, keys, strict=True):
                zf.writestr(member_info(f.name), pdfs[key].read_bytes())
        tmp.replace(path)
        print(f"  wrote {path} ({n} PDFs)")
    return planned, path


def pdf_bytes(f: SampleFile, seed: int, cache: Path) -> bytes:
    """One file of the corpus, as `corpus` writes it into the ZIP."""
    ps = program(f, seed)
    return convert([ps], cache)[_key(ps)].read_bytes()


def _key(ps: bytes) -> str:
    return hashlib.sha256(ps).hexdigest()[:32]


def convert(programs: list[bytes], cache: Path) -> dict[str, Path]:
    """The PDF of each program, converting only those not cached yet (one ps2pdf each)."""
    tag = hashlib.sha256(producer_version().encode()).hexdigest()[:8]
    folder = cache / f"ghostscript-pdf-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    out = {_key(p): folder / f"{_key(p)}.pdf" for p in programs}
    missing = {_key(p): p for p in programs if not out[_key(p)].exists()}
    if missing:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(lambda kv: _convert_one(kv[0], kv[1], folder), missing.items()))
        print(f"  ps2pdf wrote {len(missing)} PDFs in {time.monotonic() - started:.0f}s")
    return out


def _convert_one(key: str, ps: bytes, folder: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pdfqueue-gs-") as tmp:
        source, target = Path(tmp) / "in.ps", Path(tmp) / "out.pdf"
        source.write_bytes(ps)
        subprocess.run(
            [ps2pdf(), "-dSAFER", str(source), str(target)],
            check=True,
            capture_output=True,
            timeout=CONVERT_TIMEOUT_S,
        )
        shutil.move(target, folder / f"{key}.pdf")


def program(f: SampleFile, seed: int) -> bytes:
    """The PostScript of one file: the typical corpus's plan, in Times or Helvetica."""
    rng = random.Random(seed * 5_000_011 + int(f.name.removeprefix("resumes/")[:5]))
    regular = rng.choice(tuple(FONTS))
    soft = bool(f.email) and rng.random() < SOFT_HYPHEN_SHARE
    out = [_PROLOGUE.replace("{regular}", regular).replace("{bold}", FONTS[regular])]
    for number, blocks in enumerate(plan_pages(f, Density.TYPICAL, seed), 1):
        out.append(f"%%Page: {number} {number}\n")
        y = PAGE_H - MARGIN
        for b in blocks:
            size, height = STYLE[b.kind]
            bold = b.kind in ("title", "heading")
            font = FONTS[regular] if bold else regular
            out.append(f"/{'B' if bold else 'R'} findfont {size:g} scalefont setfont\n")
            for line in _wrap(b.text, font, size, PAGE_W - 2 * MARGIN):
                if y < MARGIN:
                    out.append("showpage\n")
                    y = PAGE_H - MARGIN
                shown = _soft(line, f.email or "") if soft else line
                out.append(f"{MARGIN:g} {y:.2f} moveto {_ps_string(shown)} show\n")
                y -= height
        out.append("showpage\n")
    return "".join(out).encode("latin-1", "replace")


def _soft(line: str, email: str) -> str:
    """The line with a soft hyphen typed after the address's second letter, if it has it."""
    at = line.lower().find(email)
    if at < 0:
        return line
    return f"{line[: at + 2]}\u00ad{line[at + 2 :]}"


def _ps_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return "(" + escaped + ")"
