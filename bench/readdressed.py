"""Big sparse corpora in minutes: the sample résumés, rendered once each, re-addressed per copy.

`pdfqueue_dev.corpora.samples` renders one résumé in ~16 ms of CPU (~80 ms on the loaded bench
machine):
50,000 of them would take an hour. Here a few hundred templates are rendered by the same
code with uncompressed content streams, and every PDF of the corpus is a template whose
address's local part is replaced by a unique one of the same length (`u` + digits), so
the cross-reference offsets stay valid. Each PDF names its own user once, as in
`bench.corpus`'s CLEAN corpora; only the content streams are stored uncompressed (the ZIP
still deflates them), which saves pypdf an inflate of a few KiB per page.
"""

from __future__ import annotations

import json
import random
import time
import zipfile
from pathlib import Path

from bench.corpus import CACHE
from pdfqueue_dev.corpora.samples import (
    CLEAN,
    Corpus,
    Expect,
    SampleFile,
    SampleUser,
    _doc,
    _mixed_case,
    build_corpus,
    member_info,
)

TEMPLATES = 300
"""Distinct rendered résumés a corpus cycles through."""
DOMAIN = "@people.example"


def _render_plain(f: SampleFile, seed: int) -> bytes:
    """`samples.render_pdf` for a clean file, with the page content left uncompressed."""
    index = int(f.name.removeprefix("resumes/")[:5])
    pdf = _doc(f, random.Random(seed + index))
    pdf.set_compression(False)
    return bytes(pdf.output())


def _templates(seed: int, count: int) -> list[tuple[bytes, str]]:
    """(PDF, the local part of its address as shown) for templates whose address is intact."""
    out = []
    for f in build_corpus(count, seed=seed, mix=CLEAN).files:
        if f.email is None:
            continue
        data = _render_plain(f, seed)
        local = f.email.partition("@")[0]
        shown = [s for s in (local, _mixed_case(f.email).partition("@")[0]) if s.encode() in data]
        if len(shown) == 1:  # an address wrapped across lines would not be re-addressed whole
            out.append((data, shown[0]))
    return out


def _readdress(data: bytes, old_local: str, number: int) -> tuple[bytes, str]:
    new_local = "u" + str(number).zfill(len(old_local) - 1)
    if len(new_local) != len(old_local):
        raise ValueError(f"local part {old_local!r} too short for number {number}")
    return data.replace(f"{old_local}@".encode(), f"{new_local}@".encode()), new_local + DOMAIN


def sparse(n: int, seed: int) -> tuple[Corpus, Path]:
    """A corpus of `n` clean sparse résumés and its ZIP (cached with its users' addresses)."""
    path = CACHE / f"readdressed-{n}-seed{seed}.zip"
    emails_path = path.with_suffix(".emails.json")
    if not (path.exists() and emails_path.exists()):
        started = time.monotonic()
        emails = _write(path, n, seed)
        emails_path.write_text(json.dumps(emails))
        print(f"  generated {path} ({n} PDFs) in {time.monotonic() - started:.1f}s", flush=True)
    emails = json.loads(emails_path.read_text())
    users = [SampleUser(i + 1, e, f"User {i + 1}", None) for i, e in enumerate(emails)]
    files = [
        SampleFile(f"resumes/{i + 1:05d}-u.pdf", "known", e, Expect.LINKED, None)
        for i, e in enumerate(emails)
    ]
    return Corpus(users=users, files=files), path


def _write(path: Path, n: int, seed: int) -> list[str]:
    templates = _templates(seed, min(n, TEMPLATES))
    emails = []
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(n):
            data, local = templates[i % len(templates)]
            pdf, email = _readdress(data, local, i + 1)
            zf.writestr(member_info(f"resumes/{i + 1:05d}-u.pdf"), pdf)
            emails.append(email)
    tmp.replace(path)
    return emails
