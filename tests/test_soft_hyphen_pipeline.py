"""Through the whole pipeline: a soft hyphen drawn as `-` links its user, never a second one."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import httpx
import pypdfium2 as pdfium
from fpdf import FPDF

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.corpora.samples import FIXED_DATE, SampleUser, seed_users
from tests.support.helpers import RunWorker, linked_user_ids, run_batch

JOHN = SampleUser(1, "john.smith@people.example", "John Smith", None)
HYPHENED = SampleUser(2, "jo-hn.smith@people.example", "Jo-hn Smith", None)
SHOWN = "jo\u00adhn.smith@people.example"
"""Typed with a soft hyphen (pasted from a web page, say); fpdf2's core fonts are WinAnsi,
where 0xAD is a visible hyphen glyph, and PDFium reads it back as `-`."""


def drawn_resume() -> bytes:
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_DATE)
    pdf.add_page()
    pdf.set_font("Helvetica", size=10)
    for i, line in enumerate(["John Smith", "Engineer", f"Berlin | {SHOWN}", "Experience"]):
        pdf.text(20, 20 + 8 * i, line)
    return bytes(pdf.output())


def test_the_producer_draws_the_soft_hyphen_as_a_hyphen() -> None:
    """The premise of the tests below, checked rather than assumed."""
    page = pdfium.PdfDocument(drawn_resume())[0]
    assert "jo-hn.smith@people.example" in page.get_textpage().get_text_range()


async def run(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path
) -> tuple[dict[str, object], dict[str, str]]:
    """A batch of the one drawn résumé: its status and its report's row."""
    status, rows = await run_batch(api, run_worker, tmp_path, {"john.pdf": drawn_resume()})
    return status, rows["john.pdf"]


async def test_the_dehyphenated_address_links_its_user(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    await seed_users(db, [JOHN], table=settings.users_table)
    status, row = await run(api, run_worker, tmp_path)
    assert (status["linked"], status["skipped_no_match"], status["failed"]) == (1, 0, 0)
    assert row["outcome"] == "linked"
    assert await linked_user_ids(db, settings) == {JOHN.id}


async def test_both_forms_being_users_links_neither(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    tmp_path: Path,
    db: asyncpg.Connection,
    settings: Settings,
) -> None:
    """The hyphen may be typed (jo-hn's file) or a drawn soft hyphen (john's): a guess either
    way, so the file is ambiguous and neither user gets it."""
    await seed_users(db, [JOHN, HYPHENED], table=settings.users_table)
    status, row = await run(api, run_worker, tmp_path)
    assert (status["linked"], status["skipped_ambiguous"], status["failed"]) == (0, 1, 0)
    assert (row["outcome"], row["reason"]) == ("skipped_ambiguous", "ambiguous")
    assert await linked_user_ids(db, settings) == set()
