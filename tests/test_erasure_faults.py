"""Purge and erasure with S3 or PostgreSQL stopped half-way: a clear error, and a rerun finishes.

The command runs as a real `pdfqueue` process against the module's private services. It stops
itself just before its Nth object deletion (having removed what came before), the test stops a
store for real, and the command goes on against it: it must exit non-zero with one line naming
the store. With the store back, the same command run again finishes the job: no object left,
no link left pointing at a deleted PDF, and exactly one audit record for what was removed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest
from redis.asyncio import Redis

from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.storage import Storage
from tests.support import faults
from tests.support.faults import ROOT, Run, Services

fault_services = faults.fault_services  # the fixtures, by name
run_factory = faults.run_factory
pytestmark = pytest.mark.timeout(300)
STORES = {"s3": "S3", "postgres": "postgresql"}
"""The service stopped -> the word the command's error must name it by."""

# The real command, stopping before its Nth deletion until the test says go on.
PAUSING_CLI = """
import sys
from pdfqueue.stores.storage import Storage
pause_before = int(sys.argv.pop(1))
real = Storage.delete
seen = 0
async def delete(self, key):
    global seen
    seen += 1
    if seen == pause_before:
        print("paused", flush=True)
        sys.stdin.readline()  # blocks the loop on purpose: nothing moves while a store stops
    await real(self, key)
Storage.delete = delete
from pdfqueue.cli.main import main
sys.exit(main())
"""


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


async def pdfqueue(run: Run, *args: str) -> Outcome:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "pdfqueue.cli.main", *args),
        env={**os.environ, **run.env},
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return Outcome(proc.returncode, out.decode(), err.decode())


async def interrupted(
    run: Run, services: Services, service: str, pause_before: int, *args: str
) -> Outcome:
    """Run `pdfqueue ARGS`, stop `service` just before its `pause_before`th deletion, go on."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-c", PAUSING_CLI, str(pause_before), *args),
        env={**os.environ, **run.env},
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdin is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    if line.strip() != b"paused":
        out, err = await proc.communicate()
        raise AssertionError(f"did not reach deletion {pause_before}: {line!r}{out!r}{err!r}")
    await asyncio.to_thread(services.run, "stop", "--only", service)
    try:
        proc.stdin.write(b"go on\n")
        await proc.stdin.drain()
        out, err = await asyncio.wait_for(proc.communicate(), 240)
    finally:
        await asyncio.to_thread(services.run, "start", "--only", service)
    assert proc.returncode is not None
    return Outcome(proc.returncode, out.decode(), err.decode())


def assert_clear_failure(done: Outcome, service: str) -> None:
    """Non-zero, and one line of error naming the store; no traceback."""
    assert done.code != 0, done
    lines = [line for line in done.err.splitlines() if line.strip()]
    assert len(lines) == 1, done.err
    assert lines[0].startswith("error:"), done.err
    assert STORES[service] in lines[0], done.err


@asynccontextmanager
async def database(run: Run) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(run.env["PDFQUEUE_DATABASE_URL"])
    try:
        yield conn
    finally:
        await conn.close()


async def completed(run: Run, *more: str) -> list[str]:
    """Run the batch (and `more` batches of the same run) to their end, aged a day: past the
    settle time of their last jobs, within the default retention of 30 days."""
    run.start_worker()
    await run.wait_until("completed", lambda s: s.get("status") == "COMPLETED", 180)
    ids = [run.batch_id, *more]
    async with database(run) as db:
        for batch_id in more:
            for _ in range(900):
                status = await db.fetchval(
                    "SELECT status FROM pdfqueue_batches WHERE id = $1", batch_id
                )
                if status == "COMPLETED":
                    break
                await asyncio.sleep(0.2)
            assert status == "COMPLETED"
        run.stop_all()
        await db.execute(
            "UPDATE pdfqueue_batches SET completed_at = now() - interval '1 day'"
            " WHERE id = ANY($1::text[])",
            ids,
        )
    return ids


async def another_batch(run: Run) -> str:
    """A second upload of the same ZIP in the run's queue (its PDFs already linked)."""
    batch_id = uuid.uuid4().hex
    settings = run.settings
    storage = Storage.from_settings(settings, threads=2)
    await storage.put(f"uploads/{batch_id}.zip", run.zip_path.read_bytes())
    await storage.aclose()
    pool = await connect(settings.database_url, max_size=2)
    redis = Redis.from_url(settings.redis_url)
    try:
        lifecycle = lifecycle_over(pool, redis, settings)
        await lifecycle.register(
            batch_id=batch_id, tenant="faults", source_key=f"uploads/{batch_id}.zip"
        )
    finally:
        await redis.aclose()
        await pool.close()
    return batch_id


async def stored(run: Run) -> set[str]:
    storage = Storage.from_settings(run.settings, threads=2)
    try:
        return set(await asyncio.to_thread(faults._list_keys, storage, ""))
    finally:
        await storage.aclose()


async def audit_count(db: asyncpg.Connection, subject: str, action: str) -> int:
    n: int = await db.fetchval(
        "SELECT count(*) FROM pdfqueue_audit WHERE subject = $1 AND action = $2", subject, action
    )
    return n


async def gone(run: Run, db: asyncpg.Connection, batch_id: str) -> None:
    """Nothing of the batch left in PostgreSQL or S3."""
    assert await db.fetchval("SELECT count(*) FROM pdfqueue_batches WHERE id = $1", batch_id) == 0
    assert (
        await db.fetchval("SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1", batch_id) == 0
    )
    assert f"uploads/{batch_id}.zip" not in await stored(run)


@pytest.mark.parametrize("service", ["s3", "postgres"])
async def test_purge_with_a_store_down_half_way_is_finished_by_the_next_run(
    run_factory,
    fault_services: Services,
    service: str,  # type: ignore[no-untyped-def]
) -> None:
    run: Run = await run_factory(12, seed=301)
    ids = await completed(run, await another_batch(run))
    args = ("purge", "--older-than", "1h", "--tenant", "faults", "--json")
    links = f'SELECT id, pdf_url FROM "{run.settings.users_table}" ORDER BY id'
    async with database(run) as db:
        links_before = await db.fetch(links)
    objects_before = await stored(run)

    # Before the second batch's ZIP: the first batch is purged, the second not yet.
    broken = await interrupted(run, fault_services, service, 2, *args)
    assert_clear_failure(broken, service)

    again = await pdfqueue(run, *args)
    assert again.code == 0, again.err
    assert json.loads(again.out)["batches"] >= 1
    async with database(run) as db:
        for batch_id in ids:
            await gone(run, db, batch_id)
            assert await audit_count(db, batch_id, "purge") == 1
        assert await db.fetch(links) == links_before  # a purge keeps the links
    zips = {f"uploads/{batch_id}.zip" for batch_id in ids}
    assert await stored(run) == objects_before - zips  # and the PDFs they point at


@pytest.mark.parametrize("service", ["s3", "postgres"])
async def test_a_batch_erasure_with_a_store_down_half_way_is_finished_by_the_next_run(
    run_factory,
    fault_services: Services,
    service: str,  # type: ignore[no-untyped-def]
) -> None:
    run: Run = await run_factory(24, seed=302)
    (batch_id,) = await completed(run)
    users = run.settings.users_table
    async with database(run) as db:
        pdfs = {
            r["object_key"]
            for r in await db.fetch(
                "SELECT object_key FROM pdfqueue_files WHERE batch_id = $1"
                " AND object_key IS NOT NULL",
                batch_id,
            )
        }
        assert len(pdfs) > 8
        # Asked for through the API (202: its last jobs might still run); `purge` finishes it.
        await db.execute("UPDATE pdfqueue_batches SET erasing_at = now() WHERE id = $1", batch_id)

    broken = await interrupted(run, fault_services, service, 6, "purge", "--json")
    assert_clear_failure(broken, service)
    async with database(run) as db:  # half-way: no link to a PDF that may be gone
        dangling = await db.fetchval(
            f'SELECT count(*) FROM "{users}" WHERE pdf_url = ANY($1::text[])', list(pdfs)
        )
        assert dangling == 0
        assert await audit_count(db, batch_id, "erase_batch") == 0

    again = await pdfqueue(run, "purge", "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["erasures_finished"] == 1
    async with database(run) as db:
        await gone(run, db, batch_id)
        assert await audit_count(db, batch_id, "erase_batch") == 1
        left = await db.fetchval(
            f'SELECT count(*) FROM "{users}" WHERE pdf_url = ANY($1::text[])', list(pdfs)
        )
        assert left == 0
    assert not pdfs & await stored(run)
    assert await stored(run) == set()  # no orphan object: the run's prefix is empty


@pytest.mark.parametrize("service", ["s3", "postgres"])
async def test_a_person_erasure_with_a_store_down_half_way_is_finished_by_the_next_run(
    run_factory,
    fault_services: Services,
    service: str,  # type: ignore[no-untyped-def]
) -> None:
    run: Run = await run_factory(12, seed=303)
    (batch_id,) = await completed(run)
    users = run.settings.users_table
    async with database(run) as db:
        person = await db.fetchrow(  # one whose PDF this batch stored and linked
            f'SELECT u.id, u.email, u.pdf_url FROM "{users}" u JOIN pdfqueue_files f'
            " ON f.user_id = u.id AND f.object_key = u.pdf_url WHERE f.batch_id = $1 LIMIT 1",
            batch_id,
        )
        assert person is not None
        before = await db.fetchval("SELECT coalesce(max(id), 0) FROM pdfqueue_audit")
    objects_before = await stored(run)
    email, pdf = person["email"], person["pdf_url"]

    # Before the PDF's deletion: the link is gone already, the object and the rows not yet.
    broken = await interrupted(run, fault_services, service, 1, "erase", "--email", email)
    assert_clear_failure(broken, service)
    assert email not in broken.err

    again = await pdfqueue(run, "erase", "--email", email, "--json")
    assert again.code == 0, again.err
    async with database(run) as db:
        assert (
            await db.fetchval(f'SELECT pdf_url FROM "{users}" WHERE id = $1', person["id"]) is None
        )
        rows = await db.fetch(
            "SELECT name, object_key FROM pdfqueue_files WHERE batch_id = $1 AND user_id = $2",
            batch_id,
            person["id"],
        )
        assert rows == []  # redacted: no longer the person's
        records = await db.fetchval(
            "SELECT count(*) FROM pdfqueue_audit WHERE action = 'erase_person' AND id > $1",
            before,
        )
    assert records == 1  # the failed run wrote none: one record, not one per try
    assert pdf in objects_before
    assert await stored(run) == objects_before - {pdf}  # nobody else's went
