"""Purging 100,000 per-file rows on the real PostgreSQL: in chunks, through index ranges, while
another batch keeps writing.

The rows go in by the hundred thousand through one `unnest` INSERT (not through the workers:
their shape is what matters here, not how they were made). The purge is the real
`Eraser.purge`; the concurrent writes are the real `FileStore.record` of a running batch,
a job's worth of rows at a time, and an upload's `BatchStore.create` now and then.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.models import Decision, FileRef, Outcome
from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import CHUNK_ROWS, Eraser
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.retention import RetentionStore, exclusive_statement
from pdfqueue.stores.storage import Storage

ROWS = 100_000
BATCHES = 4
WRITE_ROWS = 32
"""Rows of one concurrent write: one process job's outcomes (PDFQUEUE_PDFS_PER_JOB)."""
WAIT_FACTOR = 20
"""The longest concurrent write may take this many times the slowest chunk delete measured
alone (plus the writes' own slowest time without a purge): generous, for a shared 2-core
machine. A write that waited for the purge's locks would wait for the whole purge."""

pytestmark = pytest.mark.timeout(600)


class Recording:
    """The real pool; with `explain`, each statement's plan (with its own arguments) is taken
    just before it first runs."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.explain = False
        self.plans: dict[str, dict[str, Any]] = {}

    def _keep(self, name: str) -> Callable[..., Awaitable[Any]]:
        async def call(sql: str, *args: Any) -> Any:
            if self.explain and sql not in self.plans:
                self.plans[sql] = await _plan(self.pool, sql, *args)
            return await getattr(self.pool, name)(sql, *args)

        return call

    def __getattr__(self, name: str) -> Any:
        if name in ("fetch", "fetchrow", "fetchval", "execute"):
            return self._keep(name)
        return getattr(self.pool, name)


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[asyncpg.Pool]:
    pool = await connect(settings.database_url, max_size=6)
    yield pool
    await pool.close()


@pytest.fixture
async def eraser(settings: Settings, pool: asyncpg.Pool) -> AsyncIterator[Eraser]:
    storage = Storage.from_settings(settings, threads=4)
    client = Redis.from_url(settings.redis_url)
    recording: Any = Recording(pool)
    yield Eraser(
        RetentionStore.of(recording, settings),
        lifecycle_over(pool, client, settings),
        storage,
        settings,
    )
    await client.aclose()
    await storage.aclose()


async def ended_batches(pool: asyncpg.Pool, tenant: str, batches: int, rows: int) -> list[str]:
    """`batches` batches that ended 100 days ago with `rows` file rows between them, of the
    shape the workers write (names, reasons, users, object keys, hashes)."""
    ids = [secrets.token_hex(16) for _ in range(batches)]
    per = rows // batches
    async with pool.acquire() as conn:
        for batch_id in ids:
            await conn.execute(
                "INSERT INTO pdfqueue_batches (id, tenant, source_key, status, total_files,"
                " created_at, completed_at) VALUES ($1, $2, $3, 'COMPLETED', $4,"
                " now() - interval '101 days', now() - interval '100 days')",
                batch_id,
                tenant,
                keys.upload(batch_id),
                per,
            )
            await conn.execute(
                "INSERT INTO pdfqueue_files"
                " (batch_id, idx, name, outcome, reason, user_id, object_key, sha256)"
                " SELECT $1, i, 'CVs 2024/Zoë Müller-Øster ' || lpad(i::text, 6, '0') || ' CV.pdf',"
                " CASE WHEN i % 10 = 0 THEN 'skipped_no_match' ELSE 'linked' END,"
                " CASE WHEN i % 10 = 0 THEN 'no_user' END,"
                " CASE WHEN i % 10 = 0 THEN NULL ELSE 900000000 + i END,"
                " CASE WHEN i % 10 = 0 THEN NULL ELSE 'pdfs/' || (900000000 + i) || '/'"
                "   || md5(i::text) || md5($1 || i) || '.pdf' END,"
                " md5(i::text) || md5($1 || i)"
                " FROM unnest(ARRAY(SELECT generate_series(0, $2 - 1))) AS i",
                batch_id,
                per,
            )
        # Rows that ended 100 days ago have long been vacuumed: visibility map and statistics
        # as autovacuum leaves them.
        await conn.execute("VACUUM ANALYZE pdfqueue_files")
        await conn.execute("VACUUM ANALYZE pdfqueue_batches")
    return ids


def seq_scans_of_files(plan: dict[str, Any]) -> list[str]:
    found = []
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") == "pdfqueue_files":
        found.append(json.dumps({k: v for k, v in plan.items() if k != "Plans"}))
    for child in plan.get("Plans", []):
        found += seq_scans_of_files(child)
    return found


def node_types(plan: dict[str, Any]) -> list[str]:
    here = [f"{plan['Node Type']} on {plan.get('Relation Name', '-')}"]
    return here + [n for c in plan.get("Plans", []) for n in node_types(c)]


async def test_purge_of_100k_rows_goes_in_chunks_through_indexes_while_writes_go_on(
    settings: Settings, pool: asyncpg.Pool, eraser: Eraser
) -> None:
    tenant = f"scale-{secrets.token_hex(4)}"
    batch_rows = BatchStore(pool)
    file_rows = FileStore(pool, UsersTable.of(settings))

    # One chunk's delete, alone: the unit of the bound below.
    (probe,) = await ended_batches(pool, tenant, 1, 10 * CHUNK_ROWS)
    chunk_s = []
    while True:
        started = time.perf_counter()
        n = await eraser.retention.delete_files(probe, limit=CHUNK_ROWS)
        if not n:
            break
        chunk_s.append(time.perf_counter() - started)
    assert len(chunk_s) == 10
    await pool.execute("DELETE FROM pdfqueue_batches WHERE id = $1", probe)

    batches = await ended_batches(pool, tenant, BATCHES, ROWS)
    count = await pool.fetchval(
        "SELECT count(*) FROM pdfqueue_files WHERE batch_id = ANY($1::text[])", batches
    )
    assert count == ROWS

    # A running batch of the same tenant that keeps writing.
    running = secrets.token_hex(16)
    await batch_rows.create(running, tenant, keys.upload(running), queue_name="pdfqueue:queue")
    await batch_rows.start(running, 10**6, 0)
    written = 0

    async def write(n: int) -> float:
        nonlocal written
        rows = {
            FileRef(running, written + i, f"CVs 2024/Ann Lee {written + i:06d} CV.pdf"): Decision(
                Outcome.SKIPPED_NO_MATCH, "no_email"
            )
            for i in range(n)
        }
        started = time.perf_counter()
        await file_rows.record(running, rows)
        if written % (10 * n) == 0:  # an upload's durable row now and then
            upload = secrets.token_hex(16)
            await batch_rows.create(
                upload, f"{tenant}-up", keys.upload(upload), queue_name="pdfqueue:queue"
            )
        written += n
        return time.perf_counter() - started

    alone = [await write(WRITE_ROWS) for _ in range(50)]

    waits: list[float] = []
    done = asyncio.Event()

    async def writer() -> None:
        while not done.is_set():
            waits.append(await write(WRITE_ROWS))

    task = asyncio.create_task(writer())
    started = time.perf_counter()
    report = await eraser.purge(older_than_s=50 * 86400, tenant=tenant)
    purge_s = time.perf_counter() - started
    done.set()
    await task

    assert report.removed.batches == BATCHES
    assert report.removed.files == ROWS
    assert not await pool.fetchval(
        "SELECT count(*) FROM pdfqueue_files WHERE batch_id = ANY($1::text[])", batches
    )
    assert (
        await pool.fetchval("SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1", running)
        == written
    )
    assert await batch_rows.get(running) is not None  # running: never purged

    longest = max(waits)
    bound = WAIT_FACTOR * max(chunk_s) + max(alone)
    figures = {
        "rows": ROWS,
        "chunk_rows": CHUNK_ROWS,
        "chunk_delete_s": {"median": statistics.median(chunk_s), "max": max(chunk_s)},
        "purge_s": purge_s,
        "writes_during_purge": len(waits),
        "write_s_alone": {"median": statistics.median(alone), "max": max(alone)},
        "write_s_during_purge": {"median": statistics.median(waits), "max": longest},
        "bound_s": bound,
    }
    print("purge under load:", json.dumps(figures, default=lambda x: round(x, 4)))
    assert len(waits) >= 5, figures  # the writes did run alongside the purge
    assert longest < purge_s / 2, figures  # no write waited for the whole purge
    assert longest <= bound, figures
    await pool.execute("DELETE FROM pdfqueue_batches WHERE tenant LIKE $1", f"{tenant}%")


async def test_purge_statements_use_index_ranges_at_100k_rows(
    settings: Settings, pool: asyncpg.Pool, eraser: Eraser
) -> None:
    """Each statement a purge and a person's erasure run is EXPLAINed just before it runs,
    with its own arguments, over a table holding 100,000 more rows: none scans
    pdfqueue_files."""
    tenant = f"plan-{secrets.token_hex(4)}"
    batches = await ended_batches(pool, tenant, BATCHES, ROWS)
    recording = eraser.retention.pool
    recording.explain = True
    store = eraser.retention
    await eraser.purge(older_than_s=50 * 86400, tenant=tenant, dry_run=True)  # count_files
    await store.stored_pdfs(batches[0], after=-1, limit=CHUNK_ROWS)
    page = await store.files_of_user(900000001, after=("", -1), limit=CHUNK_ROWS)
    assert page
    await store.redact(900000001, [(batches[0], 1)])
    text_ids = RetentionStore(recording, dataclasses.replace(store.users, id_type="text"))
    await text_ids.files_of_user("nobody", after=("", -1), limit=CHUNK_ROWS)  # user_ref (0012)
    await text_ids.redact("nobody", [(batches[0], 1)])
    await eraser.purge(older_than_s=50 * 86400, tenant=tenant)  # ended_before, delete_files
    async with pool.acquire() as conn:  # unlink's statement runs on a connection of its own
        exclusive = exclusive_statement(store.users)
        recording.plans[exclusive] = await _plan(
            conn,
            exclusive,
            [batches[1]] * 3,
            [900000003, 900000004, 900000005],
            ["pdfs/900000003/x.pdf", "pdfs/900000004/y.pdf", "pdfs/900000005/z.pdf"],
        )
    kinds = {sql.split()[0] for sql in recording.plans}
    assert kinds >= {"SELECT", "DELETE", "UPDATE"}, list(recording.plans)
    assert any(sql.startswith("DELETE FROM pdfqueue_files") for sql in recording.plans)
    assert any("completed_at <" in sql for sql in recording.plans)
    shown = {sql: node_types(plan) for sql, plan in recording.plans.items()}
    print("plans:", json.dumps(shown, indent=1))
    scans = {sql: shown[sql] for sql, plan in recording.plans.items() if seq_scans_of_files(plan)}
    assert not scans, scans
    await pool.execute("DELETE FROM pdfqueue_batches WHERE tenant = $1", tenant)


async def _plan(conn: Any, sql: str, *args: Any) -> dict[str, Any]:
    (plan,) = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args))
    found: dict[str, Any] = plan["Plan"]
    return found
