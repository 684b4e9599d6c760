"""The restore drill: a PostgreSQL dump taken mid-batch, restored into an empty database, run on
an empty Redis: the batch completes exactly, from the dump and the ZIP alone.

As an operator would after losing the database and Redis together: `pg_dump` of the live
server while workers run, `createdb` and `pg_restore`, then pdfqueue (its workers) started on
the restored database with Redis flushed. Nothing else is restored.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis

from tests.support import faults
from tests.support.faults import Run, Services, check_invariants

fault_services = faults.fault_services  # the fixtures, by name
run_factory = faults.run_factory
pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def pg(tool: str, *argv: str) -> str:
    return subprocess.run(
        [str(PG_BIN / tool), *argv], check=True, capture_output=True, text=True, timeout=120
    ).stdout


async def test_dump_mid_batch_restored_into_an_empty_database_completes_exactly(
    run_factory: Any, fault_services: Services, tmp_path: Path
) -> None:
    run: Run = await run_factory(80, seed=940)
    run.env |= {"PDFQUEUE_WORKER_MAX_JOBS": "2"}
    run.start_worker()
    await run.wait_until("started", lambda s: int(s.get("processed") or 0) >= 5, timeout_s=90)

    # the backup: a consistent snapshot of the live database, its workers frozen where they
    # were (SIGSTOP: their connections and any transaction stay open), so the snapshot is
    # surely mid-batch however fast this machine is that day
    for worker in run.workers:
        worker.signal(signal.SIGSTOP)
    source = run.env["PDFQUEUE_DATABASE_URL"]
    dump = tmp_path / "pdfqueue.dump"
    await asyncio.to_thread(pg, "pg_dump", "--format=custom", f"--file={dump}", source)

    # the disaster: workers, database and Redis gone
    run.stop_all()
    restored_db = f"restored_{uuid.uuid4().hex[:8]}"
    port = fault_services.ports["PDFQUEUE_PG_PORT"]
    await asyncio.to_thread(
        pg, "createdb", "-h", "127.0.0.1", "-p", port, "-U", "pdfqueue", restored_db
    )
    target = source.rsplit("/", 1)[0] + f"/{restored_db}"
    await asyncio.to_thread(
        pg, "pg_restore", "--no-owner", "--exit-on-error", f"--dbname={target}", str(dump)
    )
    redis = Redis.from_url(run.env["PDFQUEUE_REDIS_URL"])
    await redis.flushall()
    await redis.aclose()

    run.env["PDFQUEUE_DATABASE_URL"] = target
    at_dump = await run.summary()
    assert at_dump["status"] == "PROCESSING"
    assert 0 < at_dump["processed"] < len(run.corpus.files)  # the dump was taken mid-batch

    run.workers = []
    run.start_worker()  # reconciles at start: state from the rows, the rest from the ZIP
    await run.wait_until("completed", lambda s: s.get("status") == "COMPLETED", timeout_s=150)
    await check_invariants(run)  # exact counts, each user linked once, no stray PDF
    conn = await asyncpg.connect(target)
    try:
        assert (
            await conn.fetchval("SELECT count(*) FROM pdfqueue_batches WHERE status = 'PROCESSING'")
            == 0
        )
    finally:
        await conn.close()
