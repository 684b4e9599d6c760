"""`python -m bench.pg_footprint`: PostgreSQL bytes per PDF in `pdfqueue_files`, and per day.

The rows go in as the workers write them, through the real statements: `FileStore.claim` for a
file that found its user (linked, or `already_linked` when the user has a PDF already),
`FileStore.record` for the others (`no_email`, `no_user`, a failure's reason), a job of
`PDFQUEUE_PDFS_PER_JOB` files per statement, several jobs at once. Names are ~40 bytes of
UTF-8 (`CVs 2024/Zoë Müller-Øster 000123 CV.pdf`), SHA-256s and object keys as the worker
makes them. The footprint is what `pg_total_relation_size` grew by (heap, TOAST and every
index, each also reported), after a VACUUM as autovacuum would leave it, per row; the day
figure multiplies it out at 1 M PDFs per hour and the default retention.

    uv run python -m bench.pg_footprint [--pdfs 200000] [--batch-pdfs 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.report import save, utc_stamp
from pdfqueue.domain import keys
from pdfqueue.domain.models import Claim, Decision, FileRef, Outcome
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.schema import migrate

PDFS_PER_HOUR = 1_000_000
PARALLEL_JOBS = 4
TENANT = "footprint"
QUEUE = Settings().queue_name
FIRST_NAMES = ("Zoë", "Jürgen", "Ana", "Siobhán", "Łukasz", "Mei", "Olusegun", "François")
LAST_NAMES = ("Müller-Øster", "García Márquez", "Nguyễn", "O'Connor", "Kowalski", "Håkansson")
# The mix of a typical run (bench/results/mission-*.json links ~85 %): outcome, reason.
MIX = (
    [("linked", None)] * 17
    + [("skipped_no_match", "no_email"), ("skipped_no_match", "no_user")]
    + [("failed", "unreadable")]
)


def member_name(i: int) -> str:
    first = FIRST_NAMES[i % len(FIRST_NAMES)]
    last = LAST_NAMES[(i // len(FIRST_NAMES)) % len(LAST_NAMES)]
    return f"CVs 2024/{first} {last} {i:06d} CV.pdf"


async def _sizes(pool: asyncpg.Pool) -> dict[str, int]:
    """Bytes of pdfqueue_files: total, heap, TOAST, and each index."""
    rows = await pool.fetch(
        "SELECT c.relname, pg_relation_size(c.oid) AS bytes FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = 'pdfqueue_files'::regclass"
    )
    sizes = {f"index {r['relname']}": int(r["bytes"]) for r in rows}
    sizes["heap"] = int(await pool.fetchval("SELECT pg_relation_size('pdfqueue_files')"))
    sizes["toast"] = int(
        await pool.fetchval(
            "SELECT COALESCE(pg_total_relation_size(reltoastrelid), 0) FROM pg_class"
            " WHERE oid = 'pdfqueue_files'::regclass"
        )
    )
    sizes["total"] = int(await pool.fetchval("SELECT pg_total_relation_size('pdfqueue_files')"))
    return sizes


async def _seed_users(pool: asyncpg.Pool, schema: str, count: int) -> None:
    await pool.execute(f'CREATE SCHEMA "{schema}"')
    await pool.execute(
        f'CREATE TABLE "{schema}".users (id bigint PRIMARY KEY, email text NOT NULL UNIQUE,'
        " pdf_url text)"
    )
    async with pool.acquire() as conn:
        await conn.copy_records_to_table(
            "users",
            schema_name=schema,
            records=[(i, f"candidate{i}@people.example", None) for i in range(1, count + 1)],
            columns=["id", "email", "pdf_url"],
        )


async def _job(files: FileStore, batch_id: str, first: int, count: int, base: int) -> None:
    """One process job's durable writes: its claims, then its other outcomes."""
    claims: list[Claim] = []
    others: dict[FileRef, Decision] = {}
    for i in range(first, first + count):
        ref = FileRef(batch_id, i, member_name(i))
        sha = hashlib.sha256(f"{batch_id}/{i}".encode()).hexdigest()
        outcome, reason = MIX[i % len(MIX)]
        if outcome == "linked":  # a user of their own; every 10th one with a PDF already
            user = 1 if i % 10 == 0 else base + i + 1
            claims.append(Claim(ref, user, keys.linked_pdf(user, sha), sha))
        else:
            others[ref] = Decision(Outcome(outcome), reason, sha256=sha)
    if claims:
        await files.claim(claims)
    if others:
        await files.record(batch_id, others)


async def _fill(
    batches: BatchStore, files: FileStore, pdfs: int, batch_pdfs: int, per_job: int
) -> int:
    done = 0
    while done < pdfs:
        size = min(batch_pdfs, pdfs - done)
        batch_id = uuid.uuid4().hex
        await batches.create(
            batch_id, TENANT, keys.upload(batch_id), file_name="export.zip", queue_name=QUEUE
        )
        await batches.start(batch_id, size, 0)
        starts = list(range(0, size, per_job))
        for k in range(0, len(starts), PARALLEL_JOBS):
            await asyncio.gather(
                *(
                    _job(files, batch_id, s, min(per_job, size - s), done)
                    for s in starts[k : k + PARALLEL_JOBS]
                )
            )
        done += size
        print(f"  {done:,} rows", flush=True)
    return done


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Fill and measure in a database of its own, made for the run and dropped after it: a
    table that held rows before would reuse their freed index pages and look smaller."""
    settings = Settings()
    database = f"pdfqueue_footprint_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(settings.database_url)
    await admin.execute(f'CREATE DATABASE "{database}"')
    try:
        return await _measure(args, settings, _with_database(settings.database_url, database))
    finally:
        await admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')
        await admin.close()


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def _measure(args: argparse.Namespace, settings: Settings, dsn: str) -> dict[str, Any]:
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    schema = "footprint"
    pool = await connect(dsn, max_size=PARALLEL_JOBS + 2)
    try:
        await _seed_users(pool, schema, args.pdfs + 1)
        files = FileStore(pool, UsersTable(f"{schema}.users"))
        await pool.execute("VACUUM pdfqueue_files")
        before = await _sizes(pool)
        rows_before = int(await pool.fetchval("SELECT count(*) FROM pdfqueue_files"))
        started = time.monotonic()
        written = await _fill(
            BatchStore(pool), files, args.pdfs, args.batch_pdfs, settings.pdfs_per_job
        )
        seconds = time.monotonic() - started
        await pool.execute("VACUUM ANALYZE pdfqueue_files")
        after = await _sizes(pool)
        rows = int(await pool.fetchval("SELECT count(*) FROM pdfqueue_files")) - rows_before
        assert rows == written, (rows, written)
        mix = {
            f"{r['outcome']}/{r['reason']}": int(r["n"])
            for r in await pool.fetch(
                "SELECT outcome, reason, count(*) AS n FROM pdfqueue_files f"
                " JOIN pdfqueue_batches b ON b.id = f.batch_id WHERE b.tenant = $1"
                " GROUP BY 1, 2 ORDER BY 1, 2",
                TENANT,
            )
        }
        name_bytes = float(
            await pool.fetchval(
                "SELECT avg(octet_length(name)) FROM pdfqueue_files f"
                " JOIN pdfqueue_batches b ON b.id = f.batch_id WHERE b.tenant = $1",
                TENANT,
            )
        )
        version = await pool.fetchval("SHOW server_version")
    finally:
        await pool.close()
    per_row = {k: round((after[k] - before.get(k, 0)) / rows, 1) for k in after}
    per_day = PDFS_PER_HOUR * 24
    days = settings.retention_days
    # A daily purge removes what ended more than `days` ago: up to days + 1 of rows are kept.
    kept_rows = per_day * (days + 1)
    return {
        "program": "pg_footprint",
        "host": {"cores": os.cpu_count(), "load": os.getloadavg()},
        "options": vars(args),
        "postgresql": version,
        "rows": rows,
        "seconds": round(seconds, 1),
        "rows_per_s": round(rows / seconds),
        "pdfs_per_job": settings.pdfs_per_job,
        "mix": mix,
        "avg_name_bytes": round(name_bytes, 1),
        "bytes_per_pdf": per_row,
        "at_1m_pdfs_per_hour": {
            "pdfs_per_day": per_day,
            "gb_per_day": round(per_row["total"] * per_day / 1e9, 2),
            "retention_days": days,
            "rows_kept_with_daily_purge": kept_rows,
            "gb_kept_with_daily_purge": round(per_row["total"] * kept_rows / 1e9, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdfs", type=int, default=200_000)
    parser.add_argument("--batch-pdfs", type=int, default=10_000)
    args = parser.parse_args()
    stamp = utc_stamp()
    result = {"started": stamp, **asyncio.run(run(args))}
    print(
        f"{result['bytes_per_pdf']['total']} bytes per PDF in pdfqueue_files;"
        f" {result['at_1m_pdfs_per_hour']['gb_per_day']} GB a day at 1 M PDFs/hour"
    )
    save(f"pg-footprint-{stamp}", result)


if __name__ == "__main__":
    main()
