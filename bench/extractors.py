"""`python -m bench.extractors`: text extraction candidates side by side, CPU ms per PDF."""

from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pypdfium2 as pdfium
from pypdf import PdfReader

from bench.report import save, utc_stamp
from pdfqueue_dev.corpora.documents import PRODUCERS, Density, render
from pdfqueue_dev.corpora.samples import CLEAN, build_corpus, render_pdf
from pdfqueue_worker.emails import find_emails
from pdfqueue_worker.parse import read_pdf, read_pdf_pypdf

MAX_PAGES = 50
Candidate = Callable[[bytes], list[str]]
_LITERAL = re.compile(rb"\((?:[^()\\]|\\.)*\)")


def pypdf_first(data: bytes) -> list[str]:
    """The worker's parser before PDFium: pypdf, up to the first page with an address."""
    return read_pdf_pypdf(data, MAX_PAGES).emails


def pypdf_all(data: bytes) -> list[str]:
    """pypdf's `extract_text` (plain mode: layout off) on every page."""
    reader = PdfReader(io.BytesIO(data), strict=False)
    return find_emails("\n".join(p.extract_text() for p in reader.pages))


def pypdf_layout_first(data: bytes) -> list[str]:
    """pypdf's layout mode on page one, for scale."""
    reader = PdfReader(io.BytesIO(data), strict=False)
    return find_emails(reader.pages[0].extract_text(extraction_mode="layout"))


def content_strings_first(data: bytes) -> list[str]:
    """Read only page one's content stream and join its string literals: no fonts, no
    positions. Fast, but blind to encodings, hex strings and spacing (wrong on many PDFs)."""
    reader = PdfReader(io.BytesIO(data), strict=False)
    stream = reader.pages[0].get_contents()
    raw = stream.get_data() if stream is not None else b""
    text = b" ".join(m[1:-1] for m in _LITERAL.findall(raw)).decode("latin-1")
    return find_emails(text)


def pdfium_first(data: bytes) -> list[str]:
    """The worker's parser now: PDFium's text page, up to the first page with an address."""
    return read_pdf(data, MAX_PAGES).emails


def pdfium_all(data: bytes) -> list[str]:
    """PDFium's text page on every page."""
    document = pdfium.PdfDocument(data)
    try:
        texts = []
        for number in range(len(document)):
            page = document[number]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return find_emails("\n".join(texts))
    finally:
        document.close()


CANDIDATES: dict[str, Candidate] = {
    "pypdf_first": pypdf_first,
    "pypdf_all": pypdf_all,
    "pypdf_layout_first": pypdf_layout_first,
    "content_strings_first": content_strings_first,
    "pdfium_first": pdfium_first,
    "pdfium_all": pdfium_all,
}
BASELINE = "pypdf_first"


def corpora(n: int, seed: int) -> dict[str, list[tuple[bytes, str | None]]]:
    """(PDF, the address it names) per corpus: sparse, then each dense density by producer."""
    files = build_corpus(n, seed=seed, mix=CLEAN).files
    out = {"sparse/fpdf2": [(render_pdf(f, seed=seed), f.email) for f in files]}
    for density in (Density.TYPICAL, Density.LONG):
        for producer in PRODUCERS:
            docs = [(render(f, density, seed, producer), f.email) for f in files]
            out[f"{density}/{producer}"] = docs
    return out


def measure(candidate: Candidate, docs: list[tuple[bytes, str | None]]) -> dict[str, Any]:
    """CPU ms per PDF (this process only), and how many PDFs gave their own address."""
    candidate(docs[0][0])  # imports and caches out of the measurement
    costs, found, results = [], 0, []
    for data, email in docs:
        started = time.process_time()
        try:
            emails = candidate(data)
        except Exception:
            emails = []
        costs.append((time.process_time() - started) * 1000)
        found += email in emails
        results.append(emails)
    return {
        "mean_ms": round(statistics.fmean(costs), 2),
        "p50_ms": round(statistics.median(costs), 2),
        "found": found,
        "results": results,
    }


def email_scan_ms(docs: list[tuple[bytes, str | None]]) -> float:
    """CPU ms per PDF of the address scan alone, on page one's PDFium text."""
    texts = []
    for data, _ in docs:
        document = pdfium.PdfDocument(data)
        texts.append(document[0].get_textpage().get_text_range())
        document.close()
    started = time.process_time()
    for text in texts:
        find_emails(text)
    return round((time.process_time() - started) * 1000 / len(texts), 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.extractors", description=__doc__)
    p.add_argument("--files", type=int, default=40, help="PDFs per corpus (40)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    rows: dict[str, Any] = {}
    for name, docs in corpora(args.files, args.seed).items():
        row: dict[str, Any] = {"kib": round(statistics.fmean(len(d) for d, _ in docs) / 1024, 1)}
        results = {}
        for cname, candidate in CANDIDATES.items():
            m = measure(candidate, docs)
            results[cname] = m.pop("results")
            row[cname] = m
        for cname in CANDIDATES:
            row[cname]["same_as_baseline"] = sum(
                a == b for a, b in zip(results[cname], results[BASELINE], strict=True)
            )
        row["email_scan_ms"] = email_scan_ms(docs)
        row["speedup"] = round(row[BASELINE]["mean_ms"] / row["pdfium_first"]["mean_ms"], 2)
        rows[name] = row
        print(_line(name, row, len(docs)), flush=True)
    save(f"parse-{utc_stamp()}", {"files": args.files, "seed": args.seed, "corpora": rows})
    return 0


def _line(name: str, row: dict[str, Any], n: int) -> str:
    cells = " ".join(
        f"{c}={row[c]['mean_ms']}ms({row[c]['found']}/{n},same {row[c]['same_as_baseline']})"
        for c in CANDIDATES
    )
    return f"{name:20} {row['kib']:6}KiB scan={row['email_scan_ms']}ms x{row['speedup']} {cells}"


if __name__ == "__main__":
    sys.exit(main())
