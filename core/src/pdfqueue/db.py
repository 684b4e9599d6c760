"""PostgreSQL: the pool, migrations, and every query pdfqueue runs (the durable record)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import asyncpg

from pdfqueue.models import COUNTERS, BatchStatus, BatchSummary, FileRef, FileResult, Outcome

MIGRATIONS_LOCK = 0x70646671  # "pdfq": serializes concurrent `pdfqueue migrate` runs


def quote_ident(name: str) -> str:
    """Quote a validated `[schema.]table` name (see Settings.users_table)."""
    return ".".join(f'"{part}"' for part in name.split("."))


async def connect(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, timeout=5, command_timeout=15
    )
    return pool


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply the bundled migrations not yet recorded, in order; returns those applied."""
    folder = resources.files("pdfqueue").joinpath("migrations")
    scripts = sorted((p.name, p.read_text()) for p in folder.iterdir() if p.name.endswith(".sql"))
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATIONS_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS pdfqueue_migrations"
            " (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM pdfqueue_migrations")}
        for name, sql in scripts:
            if name not in done:
                await conn.execute(sql)
                await conn.execute("INSERT INTO pdfqueue_migrations (version) VALUES ($1)", name)
                applied.append(name)
    return applied


@dataclass(frozen=True)
class UserRow:
    id: int
    email: str
    pdf_url: str | None


@dataclass(frozen=True)
class Database:
    """Queries over one pool; `users_table` is the host application's table."""

    pool: asyncpg.Pool
    users_table: str

    async def check(self) -> None:
        await self.pool.fetchval("SELECT 1")

    # --- batches --------------------------------------------------------------------------
    async def create_batch(self, batch_id: str, tenant: str, source_key: str) -> BatchSummary:
        row = await self.pool.fetchrow(
            "INSERT INTO pdfqueue_batches (id, tenant, source_key, status) VALUES ($1, $2, $3, $4)"
            " ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id RETURNING *",
            batch_id,
            tenant,
            source_key,
            BatchStatus.PENDING.value,
        )
        return _summary(row)

    async def delete_batch(self, batch_id: str) -> None:
        await self.pool.execute("DELETE FROM pdfqueue_batches WHERE id = $1", batch_id)

    async def batch(self, batch_id: str) -> tuple[BatchSummary, str, str] | None:
        """(summary, tenant, source key); counters come from the per-file rows until final."""
        row = await self.pool.fetchrow("SELECT * FROM pdfqueue_batches WHERE id = $1", batch_id)
        if row is None:
            return None
        summary = _summary(row)
        if summary.status not in {BatchStatus.COMPLETED, BatchStatus.FAILED}:
            counts = await self.outcome_counts(batch_id)
            summary = summary.model_copy(update={**counts, "processed": sum(counts.values())})
        return summary, row["tenant"], row["source_key"]

    async def start_batch(self, batch_id: str, total_files: int, ignored: int) -> None:
        await self.pool.execute(
            "UPDATE pdfqueue_batches SET total_files = $2, ignored = $3,"
            " status = CASE WHEN status = 'PENDING' THEN 'PROCESSING' ELSE status END"
            " WHERE id = $1",
            batch_id,
            total_files,
            ignored,
        )

    async def finish_batch(
        self, batch_id: str, status: BatchStatus, error: str | None = None
    ) -> BatchSummary:
        """Write the final summary, counted from the per-file rows (idempotent)."""
        counts = await self.outcome_counts(batch_id)
        row = await self.pool.fetchrow(
            "UPDATE pdfqueue_batches SET status = $2, error = COALESCE($3, error),"
            " completed_at = COALESCE(completed_at, now()), processed = $4, linked = $5,"
            " skipped_no_match = $6, skipped_already_exists = $7, failed = $8"
            " WHERE id = $1 RETURNING *",
            batch_id,
            status.value,
            error,
            sum(counts.values()),
            *(counts[c] for c in COUNTERS),
        )
        return _summary(row)

    async def outcome_counts(self, batch_id: str) -> dict[str, int]:
        rows = await self.pool.fetch(
            "SELECT outcome, count(*) AS n FROM pdfqueue_files WHERE batch_id = $1"
            " AND outcome <> 'ignored' GROUP BY outcome",
            batch_id,
        )
        counts = dict.fromkeys(COUNTERS, 0)
        counts.update({r["outcome"]: r["n"] for r in rows})
        return counts

    async def outcomes(self, batch_id: str) -> dict[int, str]:
        rows = await self.pool.fetch(
            "SELECT idx, outcome FROM pdfqueue_files WHERE batch_id = $1 AND outcome <> 'ignored'",
            batch_id,
        )
        return {r["idx"]: r["outcome"] for r in rows}

    # --- files ----------------------------------------------------------------------------
    async def record_ignored(self, batch_id: str, members: Sequence[tuple[int, str, str]]) -> None:
        """Members reported but not counted (not PDFs by name): (index, name, reason)."""
        await self.pool.executemany(
            "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome, reason)"
            " VALUES ($1, $2, $3, 'ignored', $4) ON CONFLICT DO NOTHING",
            [(batch_id, i, n, r) for i, n, r in members],
        )

    async def record_file(
        self,
        ref: FileRef,
        outcome: Outcome,
        reason: str | None,
        *,
        user_id: int | None = None,
        sha256: str | None = None,
    ) -> tuple[Outcome, str | None]:
        """Store one outcome once; a retry gets back what the first try stored."""
        stored, _ = await _record_once(
            self.pool, ref, outcome, reason, user_id=user_id, object_key=None, sha256=sha256
        )
        return stored

    async def claim(
        self, ref: FileRef, *, user_id: int, object_key: str, sha256: str
    ) -> tuple[Outcome, str | None]:
        """Link the user to the object only if nobody has, and record the file, atomically.

        The user's row is locked first, so racing workers decide on its committed value:
        one links, the others see that link (`duplicate` when it is the same content, else
        `already_linked`). A retry after a crash finds its own earlier row and claims nothing.
        """
        users = quote_ident(self.users_table)
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                f"SELECT u.pdf_url, f.outcome, f.reason FROM {users} u"
                f" LEFT JOIN pdfqueue_files f ON f.batch_id = $1 AND f.idx = $2"
                f" WHERE u.id = $3 FOR UPDATE OF u",
                ref.batch_id,
                ref.index,
                user_id,
            )
            if row is not None and row["outcome"] is not None:
                return Outcome(row["outcome"]), row["reason"]
            current = row["pdf_url"] if row is not None else None
            if row is None:  # the user was deleted meanwhile
                outcome, reason = Outcome.SKIPPED_NO_MATCH, "no_user"
            elif current is None:
                outcome, reason = Outcome.LINKED, None
            else:
                outcome = Outcome.SKIPPED_ALREADY_EXISTS
                reason = "duplicate" if current == object_key else "already_linked"
            # The row goes in first: if a second delivery of this job already wrote one, the
            # insert does nothing and neither does the claim.
            key = object_key if outcome is Outcome.LINKED else None
            stored, inserted = await _record_once(
                conn, ref, outcome, reason, user_id=user_id, object_key=key, sha256=sha256
            )
            if inserted and outcome is Outcome.LINKED:
                await conn.execute(
                    f"UPDATE {users} SET pdf_url = $2 WHERE id = $1", user_id, object_key
                )
        return stored

    async def files(self, batch_id: str, *, after: int = -1, limit: int = 1000) -> list[FileResult]:
        rows = await self.pool.fetch(
            "SELECT idx, name, outcome, reason, user_id, object_key, sha256 FROM pdfqueue_files"
            " WHERE batch_id = $1 AND idx > $2 ORDER BY idx LIMIT $3",
            batch_id,
            after,
            limit,
        )
        return [FileResult(index=r["idx"], **{k: r[k] for k in _FILE_COLUMNS}) for r in rows]

    async def iter_files(self, batch_id: str, page: int = 5000) -> AsyncIterator[FileResult]:
        after = -1
        while rows := await self.files(batch_id, after=after, limit=page):
            for r in rows:
                yield r
            after = rows[-1].index

    # --- users (the host application's table) ------------------------------------------------
    async def users_by_email(self, emails: Sequence[str]) -> dict[str, UserRow]:
        """Users whose lower-cased email is one of `emails` (index `lower(email)` for speed)."""
        rows = await self.pool.fetch(
            f"SELECT id, lower(email) AS email, pdf_url FROM {quote_ident(self.users_table)}"
            f" WHERE lower(email) = ANY($1::text[])",
            list(emails),
        )
        return {r["email"]: UserRow(r["id"], r["email"], r["pdf_url"]) for r in rows}


_RECORD_ONCE = (
    "WITH ins AS (INSERT INTO pdfqueue_files"
    " (batch_id, idx, name, outcome, reason, user_id, object_key, sha256)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING"
    " RETURNING outcome, reason, true AS inserted)"
    " SELECT * FROM ins UNION ALL SELECT outcome, reason, false FROM pdfqueue_files"
    " WHERE batch_id = $1 AND idx = $2 AND NOT EXISTS (SELECT 1 FROM ins)"
)


async def _record_once(
    conn: asyncpg.Pool | asyncpg.Connection,
    ref: FileRef,
    outcome: Outcome,
    reason: str | None,
    *,
    user_id: int | None,
    object_key: str | None,
    sha256: str | None,
) -> tuple[tuple[Outcome, str | None], bool]:
    """Insert the file's row unless one exists; (the stored outcome and reason, inserted?)."""
    row = await conn.fetchrow(
        _RECORD_ONCE,
        ref.batch_id,
        ref.index,
        ref.name,
        outcome.value,
        reason,
        user_id,
        object_key,
        sha256,
    )
    return (Outcome(row["outcome"]), row["reason"]), bool(row["inserted"])


_FILE_COLUMNS = ("name", "outcome", "reason", "user_id", "object_key", "sha256")


def _summary(row: Any) -> BatchSummary:
    return BatchSummary(
        batch_id=row["id"],
        status=BatchStatus(row["status"]),
        total_files=row["total_files"],
        processed=row["processed"],
        ignored=row["ignored"],
        error=row["error"],
        created_at=row["created_at"],
        completed_at=row["completed_at"],
        **{c: row[c] for c in COUNTERS},
    )
