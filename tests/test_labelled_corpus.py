"""On a labelled corpus of every failure mode: never the wrong user, and the recall targets."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from pdfqueue.domain.placeholders import PLACEHOLDER_DOMAINS
from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_dev.corpora.labelled import SCAN_STYLES, Labelled, User, cached
from pdfqueue_worker.extractor import Extractor
from pdfqueue_worker.matching import Verdict, choose
from pdfqueue_worker.parse import Extraction

PER_TEXT_MODE = 20
PER_SCAN_STYLE = 8
NOISY = {"scan_300_noisy", "scan_150_noisy"}
"""Scans past the clean-scan target (still never a wrong link)."""


@pytest.fixture(scope="module")
def corpus() -> tuple[list[User], list[tuple[Labelled, bytes]]]:
    return cached(PER_TEXT_MODE, PER_SCAN_STYLE, seed=14)


@pytest.fixture(scope="module")
async def extractor() -> AsyncIterator[Extractor]:
    ex = Extractor(
        processes=2,
        timeout_s=20,
        max_pages=50,
        memory_bytes=320 * 1024**2,
        tasks_per_process=1000,
        ocr_max_pages=2,
        ocr_timeout_s=60,
    )
    yield ex
    ex.close()


async def link_all(
    extractor: Extractor, users: list[User], files: list[tuple[Labelled, bytes]]
) -> dict[str, tuple[Verdict, Extraction]]:
    """Each file's verdict as the worker reaches it: read to the first page with a candidate,
    match, read on while nobody matched."""
    rows = {u.email: UserRow(u.id, u.email, None) for u in users}
    domains = frozenset(PLACEHOLDER_DOMAINS)
    limit = asyncio.Semaphore(4)

    async def one(data: bytes) -> tuple[Verdict, Extraction]:
        async with limit:
            page: int | None = 0
            while page is not None:
                read = await extractor.extract(data, page)
                verdict = choose(read.candidates, rows, domains)
                if verdict.user is not None or verdict.ambiguous:
                    return verdict, read
                page = read.next_page
            return verdict, read

    results = await asyncio.gather(*(one(data) for _, data in files))
    return {label.name: result for (label, _), result in zip(files, results, strict=True)}


@pytest.mark.timeout(1200)
async def test_no_wrong_user_and_recall_targets_on_the_labelled_corpus(
    corpus: tuple[list[User], list[tuple[Labelled, bytes]]], extractor: Extractor
) -> None:
    users, files = corpus
    assert len(files) >= 400
    assert {label.mode for label, _ in files} >= {*SCAN_STYLES, "mailto_only", "ambiguous"}
    verdicts = await link_all(extractor, users, files)
    wrong, missed, found = [], Counter[str](), Counter[str]()
    for label, _ in files:
        verdict, read = verdicts[label.name]
        got = verdict.user.id if verdict.user else None
        if got is not None and got != label.owner:
            wrong.append((label.name, label.owner, got))
        if label.ambiguous:
            assert verdict.ambiguous, label
        assert (read.ocr_pages > 0) == (label.layer == "scan"), label
        group = label.layer if label.mode not in NOISY else "noisy"
        if label.owner is not None:
            found[group] += got == label.owner
            missed[group] += got != label.owner
    assert wrong == []
    text_recall = found["text"] / (found["text"] + missed["text"])
    scan_recall = found["scan"] / (found["scan"] + missed["scan"])
    assert text_recall >= 0.99, missed
    assert scan_recall >= 0.95, missed
