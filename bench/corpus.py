"""Inputs for the bench: clean résumé corpora at three densities and two by other producers
(LibreOffice, Ghostscript; cached ZIPs), the users table, a big random ZIP."""

from __future__ import annotations

import functools
import hashlib
import os
import statistics
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg

from pdfqueue_dev.corpora import ghostscript, libreoffice
from pdfqueue_dev.corpora.documents import Density, render
from pdfqueue_dev.corpora.samples import (
    CLEAN,
    Corpus,
    SampleFile,
    build_corpus,
    member_info,
    render_pdf,
    seed_users,
    write_zip,
)

CACHE = Path(os.environ.get("PDFQUEUE_BENCH_CACHE", "/tmp/pdfqueue-bench"))
USERS_TABLE = "users"
"""The seed peer's SQL says `users`; both systems get a table of that name in the bench's own
schema (pdfqueue as `schema.users`, the peer through its search_path), never `public.users`,
which other people's runs on a shared database may be using."""
WARMUP_SEED = 7


def corpus(n: int, seed: int, density: Density = Density.SPARSE) -> tuple[Corpus, Path]:
    """A CLEAN corpus (every PDF names a known user once) and its ZIP, generated once: the
    same n, seed and density always give the same bytes."""
    if density is Density.LIBREOFFICE:
        return libreoffice.corpus(n, seed, CACHE)
    if density is Density.GHOSTSCRIPT:
        return ghostscript.corpus(n, seed, CACHE)
    planned = build_corpus(n, seed=seed, mix=CLEAN)
    name = f"clean-{n}-seed{seed}" if density is Density.SPARSE else f"{density}-{n}-seed{seed}"
    name += f"-{_fingerprint(planned)}"  # a ZIP of an older sample generator is not reused
    path = CACHE / f"{name}.zip"
    if not path.exists():
        started = time.monotonic()
        tmp = path.with_suffix(".tmp")
        if density is Density.SPARSE:
            write_zip(planned, tmp, seed=seed, junk=False)
        else:
            _write_dense_zip(planned, tmp, seed, density)
        tmp.replace(path)
        print(f"  generated {path} ({n} PDFs) in {time.monotonic() - started:.1f}s")
    return planned, path


def _fingerprint(planned: Corpus) -> str:
    """Who the corpus names, hashed: the same files and users give the same name."""
    named = "\n".join(f"{f.name} {f.email}" for f in planned.files)
    return hashlib.sha256(named.encode()).hexdigest()[:12]


def pdf_bytes(f: SampleFile, seed: int, density: Density) -> bytes:
    """One file of a corpus, as `corpus` writes it into the ZIP."""
    if density is Density.LIBREOFFICE:
        return libreoffice.pdf_bytes(f, seed, CACHE)
    if density is Density.GHOSTSCRIPT:
        return ghostscript.pdf_bytes(f, seed, CACHE)
    return render_pdf(f, seed=seed) if density is Density.SPARSE else render(f, density, seed)


def _write_dense_zip(planned: Corpus, path: Path, seed: int, density: Density) -> None:
    """Rendered on every core (each PDF depends only on its file, density and seed, so the
    bytes are those of one process), written in the corpus's order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    render_one = functools.partial(render, density=density, seed=seed)
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf,
        ProcessPoolExecutor(os.cpu_count() or 1) as pool,
    ):
        for f, data in zip(
            planned.files, pool.map(render_one, planned.files, chunksize=64), strict=True
        ):
            zf.writestr(member_info(f.name), data)


async def reseed(database_url: str, schema: str, planned: Corpus) -> None:
    """Truncate and refill `schema`.users, so every run links every PDF again."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(f'SET search_path TO "{schema}"')
        await seed_users(conn, planned.users, table=USERS_TABLE)
    finally:
        await conn.close()


async def linked_in_db(database_url: str, schema: str) -> tuple[int, list[str]]:
    """How many users have a pdf_url now, and those urls (to clean up the peer's objects)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            f'SELECT pdf_url FROM "{schema}"."{USERS_TABLE}" WHERE pdf_url IS NOT NULL'
        )
    finally:
        await conn.close()
    return len(rows), [r["pdf_url"] for r in rows]


def big_zip(path: Path, total_bytes: int, members: int = 10) -> Path:
    """A ZIP of incompressible random bytes in `members` stored `.pdf` members, streamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    each = total_bytes // members
    chunk = 4 * 1024 * 1024
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for i in range(members):
            info = zipfile.ZipInfo(f"big/part-{i:02d}.pdf", date_time=(2024, 1, 1, 0, 0, 0))
            with zf.open(info, "w", force_zip64=True) as out:
                left = each
                while left > 0:
                    n = min(chunk, left)
                    out.write(os.urandom(n))
                    left -= n
    return path


def parse_cost_ms(
    planned: Corpus, seed: int, density: Density = Density.SPARSE, sample: int = 60
) -> dict[str, float]:
    """CPU milliseconds the worker's parser (and pypdf, the one before it) needs per PDF of
    this corpus, measured in this process.

    The ceiling for parsing-bound throughput on C cores is C / cost: the number to compare
    the end-to-end rate with.
    """
    from pdfqueue_worker.parse import read_pdf, read_pdf_pypdf

    docs = [pdf_bytes(f, seed, density) for f in planned.files[:sample]]
    pdfium = _costs(read_pdf, docs)
    # pypdf's reader never read link annotations: a link-only address is no miss of its own
    pypdf = _costs(read_pdf_pypdf, docs, need_email=density is not Density.LIBREOFFICE)
    return {
        "mean_ms": round(statistics.fmean(pdfium), 2),
        "median_ms": round(statistics.median(pdfium), 2),
        "pypdf_mean_ms": round(statistics.fmean(pypdf), 2),
        "pypdf_median_ms": round(statistics.median(pypdf), 2),
        "mean_kib": round(statistics.fmean(len(d) for d in docs) / 1024, 1),
        "sample": len(docs),
    }


def _costs(
    read: Callable[[bytes, int], Any], docs: list[bytes], *, need_email: bool = True
) -> list[float]:
    read(docs[0], 50)  # imports and caches out of the measurement
    costs = []
    for data in docs:
        started = time.process_time()
        found = read(data, 50)
        costs.append((time.process_time() - started) * 1000)
        if found.reason or (need_email and not found.emails):
            raise RuntimeError(f"a clean PDF did not parse ({found.reason or 'no email'})")
    return costs
