"""Through the whole pipeline: ambiguity, link annotations, placeholders and OCR, counted."""

from __future__ import annotations

import random
from pathlib import Path

import asyncpg
import httpx
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.corpora.labelled import ScanStyle, fpdf_doc, scan
from pdfqueue_dev.corpora.samples import SampleUser, seed_users
from tests.support.helpers import RunWorker, linked_user_ids, run_batch

JANE = SampleUser(1, "jane.doe@people.example", "Jane Doe", None)
BOB = SampleUser(2, "bob.roe@people.example", "Bob Roe", None)
TEMPLATE = SampleUser(3, "hello@reallygreatsite.com", "Somebody", None)


def resume(contact: str, *, links: tuple[str, ...] = ()) -> bytes:
    return fpdf_doc(["Jane Doe", "Engineer", f"Berlin | {contact}", "Experience"], links=links)


# OCR takes seconds where PDFium takes milliseconds, and much longer on a loaded machine: a
# job deadline that fits it, so that the test checks outcomes, not the machine's speed.
@pytest.mark.settings(job_timeout_s=90, job_completion_wait_s=100, ocr_timeout_s=80)
@pytest.mark.timeout(400)
async def test_ambiguous_mailto_placeholder_and_scan_each_get_their_outcome(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    await seed_users(db, [JANE, BOB, TEMPLATE], table=settings.users_table)
    bob_scan = scan(resume(BOB.email), ScanStyle(angle=1.5), random.Random(1))
    status, rows = await run_batch(
        api,
        run_worker,
        tmp_path,
        {
            "two-users.pdf": resume(f"{JANE.email} / {BOB.email}"),
            "mailto.pdf": resume("Email me", links=(f"mailto:{JANE.email}",)),
            "template.pdf": resume(TEMPLATE.email),
            "scan.pdf": bob_scan,
        },
    )
    counts = {k: status[k] for k in ("linked", "skipped_no_match", "skipped_ambiguous", "failed")}
    assert counts == {"linked": 2, "skipped_no_match": 1, "skipped_ambiguous": 1, "failed": 0}
    assert (rows["two-users.pdf"]["outcome"], rows["two-users.pdf"]["reason"]) == (
        "skipped_ambiguous",
        "ambiguous",
    )
    assert (rows["template.pdf"]["outcome"], rows["template.pdf"]["reason"]) == (
        "skipped_no_match",
        "no_user",
    )
    assert {n: r["outcome"] for n, r in rows.items() if r["outcome"] == "linked"} == {
        "mailto.pdf": "linked",
        "scan.pdf": "linked",
    }
    assert {n: r["ocr"] for n, r in rows.items()} == {
        "two-users.pdf": "False",
        "mailto.pdf": "False",
        "template.pdf": "False",
        "scan.pdf": "True",
    }
    assert await linked_user_ids(db, settings) == {JANE.id, BOB.id}  # never the template's user
    final = await db.fetchrow(
        "SELECT skipped_ambiguous, linked, processed FROM pdfqueue_batches WHERE id = $1",
        status["batch_id"],
    )
    assert dict(final) == {"skipped_ambiguous": 1, "linked": 2, "processed": 4}


@pytest.mark.settings(ocr_max_pages=0)
async def test_a_scan_without_ocr_is_skipped_as_needs_ocr(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    await seed_users(db, [JANE, BOB], table=settings.users_table)
    bob_scan = scan(resume(BOB.email), ScanStyle(), random.Random(2))
    status, rows = await run_batch(
        api, run_worker, tmp_path, {"scan.pdf": bob_scan, "text.pdf": resume(JANE.email)}
    )
    assert (status["linked"], status["skipped_no_match"], status["failed"]) == (1, 1, 0)
    assert (rows["scan.pdf"]["outcome"], rows["scan.pdf"]["reason"], rows["scan.pdf"]["ocr"]) == (
        "skipped_no_match",
        "needs_ocr",
        "False",
    )
    assert await linked_user_ids(db, settings) == {JANE.id}


@pytest.mark.settings(pdf_engine="pypdf")
async def test_the_pypdf_engine_reads_the_text_layer_only(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    """PDFQUEUE_PDF_ENGINE=pypdf reaches the parsing processes: an address in the text is
    linked, one only in a `mailto:` link is not seen (PDFium would link it), and a scan is
    not read by OCR but named `needs_ocr`."""
    assert settings.pdf_engine == "pypdf"
    await seed_users(db, [JANE, BOB], table=settings.users_table)
    bob_scan = scan(resume(BOB.email), ScanStyle(), random.Random(2))
    status, rows = await run_batch(
        api,
        run_worker,
        tmp_path,
        {
            "text.pdf": resume(JANE.email),
            "mailto.pdf": resume("Email me", links=(f"mailto:{BOB.email}",)),
            "scan.pdf": bob_scan,
        },
    )
    assert (status["linked"], status["skipped_no_match"], status["failed"]) == (1, 2, 0)
    assert {n: (r["outcome"], r["reason"], r["ocr"]) for n, r in rows.items()} == {
        "text.pdf": ("linked", "", "False"),
        "mailto.pdf": ("skipped_no_match", "no_email", "False"),
        "scan.pdf": ("skipped_no_match", "needs_ocr", "False"),
    }
    assert await linked_user_ids(db, settings) == {JANE.id}
