"""The per-job statements read only their own files' rows, however many the batch has."""

from __future__ import annotations

import uuid

import asyncpg

from pdfqueue.domain.models import Claim, Decision, FileRef, Outcome
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue_dev.corpora.samples import SampleUser, seed_users

BATCH_FILES = 3000
JOB = 16


async def index_fetches(pool: asyncpg.Pool) -> int:
    """Rows of `pdfqueue_files` fetched through its indexes so far, this connection's included."""
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        fetched: int = await conn.fetchval(
            "SELECT idx_tup_fetch FROM pg_stat_user_tables WHERE relname = 'pdfqueue_files'"
        )
        return fetched


async def test_a_jobs_claim_and_record_do_not_read_the_whole_batch(
    settings: Settings, db: asyncpg.Connection
) -> None:
    """A plan that scans the batch's range of the primary key (the statement's own files as a
    filter) made each job's statements read every file recorded before it: quadratic in the
    batch. Each reads its own files' rows now, by (batch, index)."""
    users = [SampleUser(i, f"user{i}@people.example", f"User {i}", None) for i in range(1, JOB + 1)]
    await seed_users(db, users, table=settings.users_table)
    pool = await connect(settings.database_url, min_size=1, max_size=1)  # one backend to flush
    try:
        files = FileStore(pool, UsersTable.of(settings))
        batch_id = uuid.uuid4().hex
        await BatchStore(pool).create(
            batch_id, "statements", "uploads/x.zip", queue_name="pdfqueue:queue"
        )
        # as in a running batch: the planner's statistics predate this batch's files
        await db.execute("ANALYZE pdfqueue_files")
        earlier = {
            FileRef(batch_id, i, f"{i}.pdf"): Decision(Outcome.SKIPPED_NO_MATCH, "no_email")
            for i in range(BATCH_FILES)
        }
        await files.record(batch_id, earlier)

        before = await index_fetches(pool)
        claims = [
            Claim(FileRef(batch_id, BATCH_FILES + u.id, "l.pdf"), u.id, f"pdfs/{u.id}/a.pdf", "a")
            for u in users
        ]
        claimed = await files.claim(claims)
        more = {
            FileRef(batch_id, BATCH_FILES + JOB + i, f"m{i}.pdf"): Decision(Outcome.FAILED, "x")
            for i in range(1, JOB + 1)
        }
        recorded = await files.record(batch_id, more)
        fetched = await index_fetches(pool) - before
    finally:
        await pool.close()
    assert {d.outcome for d in claimed.values()} == {Outcome.LINKED}
    assert len(recorded) == JOB
    assert fetched < 10 * JOB, fetched  # a few per file, not the batch's 3,000
