"""PostgreSQL for retention and erasure: ended batches, what they stored, and the audit trail.

Every statement here touches a bounded number of rows (a chunk of one batch's files, one
batch's rows, one person's files a page at a time), through an index range, so that purging
millions of rows never holds a lock for longer than one chunk.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from pdfqueue.domain.models import TERMINAL, UserId
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.driver_errors import postgres_errors, typed_methods
from pdfqueue.stores.postgres.pool import UsersTable

ERASED_NAME = "[erased]"
"""What an erased person's file rows are called in their batch's report from then on."""
_ENDED = tuple(s.value for s in TERMINAL)


@dataclass(frozen=True)
class EndedBatch:
    """A batch that ended: who it belongs to, and what in storage it came from."""

    batch_id: str
    tenant: str
    source_key: str
    status: str
    erasing: bool


@dataclass(frozen=True)
class StoredPdf:
    """A PDF that a batch stored and linked: its row, its user and its object."""

    batch_id: str
    index: int
    user_id: UserId
    object_key: str


@dataclass(frozen=True)
class AuditRecord:
    """One purge or erasure: when, by whom, of what, and how much was removed."""

    at: datetime
    actor: str
    action: str
    subject: str
    files: int
    objects: int
    bytes: int


@dataclass(frozen=True)
class Removal:
    """A batch's removal as the audit trail has it: which record, what, and when."""

    id: int
    batch_id: str
    action: str
    at: datetime


@typed_methods(postgres_errors)
@dataclass(frozen=True)
class RetentionStore:
    """Queries of purging and erasure over one pool; `users` is the host's table."""

    pool: asyncpg.Pool
    users: UsersTable

    @classmethod
    def of(cls, pool: asyncpg.Pool, settings: Settings) -> RetentionStore:
        """Over `pool`, with the users table as `settings` describe it (never scoped: an
        erasure is of every tenant's rows of a person)."""
        return cls(pool, UsersTable.of(settings))

    # --- which batches ----------------------------------------------------------------------
    async def ended_before(
        self,
        *,
        older_than_s: float,
        tenant: str | None = None,
        excluding: Sequence[str] = (),
        limit: int = 500,
    ) -> list[EndedBatch]:
        """Batches that ended more than `older_than_s` ago (of `tenant`, or of any tenant not
        in `excluding`), oldest first. Never a running batch: only terminal ones have ended."""
        rows = await self.pool.fetch(
            "SELECT id, tenant, source_key, status, erasing_at IS NOT NULL AS erasing"
            " FROM pdfqueue_batches"
            " WHERE status = ANY($1::text[])"
            " AND completed_at < now() - make_interval(secs => $2)"
            " AND ($3::text IS NULL OR tenant = $3) AND NOT (tenant = ANY($4::text[]))"
            " ORDER BY completed_at LIMIT $5",
            list(_ENDED),
            older_than_s,
            tenant,
            list(excluding),
            limit,
        )
        return [_ended(r) for r in rows]

    async def erasing(self, *, limit: int = 100) -> list[EndedBatch]:
        """Batches whose erasure was asked for and has not finished."""
        rows = await self.pool.fetch(
            "SELECT id, tenant, source_key, status, true AS erasing FROM pdfqueue_batches"
            " WHERE erasing_at IS NOT NULL ORDER BY erasing_at LIMIT $1",
            limit,
        )
        return [_ended(r) for r in rows]

    async def mark_erasing(self, batch_id: str, tenant: str | None) -> EndedBatch | None:
        """Hide the batch from every reader from now on (of `tenant`, or of anyone when
        None); None when there is no such batch, or it is another tenant's."""
        row = await self.pool.fetchrow(
            "UPDATE pdfqueue_batches SET erasing_at = COALESCE(erasing_at, now())"
            " WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)"
            " RETURNING id, tenant, source_key, status, true AS erasing",
            batch_id,
            tenant,
        )
        return _ended(row) if row is not None else None

    async def settled_for(self, batch_id: str, margin_s: float) -> bool:
        """Whether no job of the batch can link a user any more: it completed (every file has
        its outcome, so a job delivered again claims nothing), or it ended otherwise more than
        `margin_s` ago (a cancelled batch's running jobs finish first)."""
        settled: bool | None = await self.pool.fetchval(
            "SELECT status = 'COMPLETED' OR (status = ANY($2::text[])"
            " AND completed_at < now() - make_interval(secs => $3))"
            " FROM pdfqueue_batches WHERE id = $1",
            batch_id,
            list(_ENDED),
            margin_s,
        )
        return bool(settled)

    # --- what a batch stored ----------------------------------------------------------------
    async def stored_pdfs(self, batch_id: str, *, after: int, limit: int) -> list[StoredPdf]:
        """The batch's linked PDFs in index order, after index `after`."""
        rows = await self.pool.fetch(
            "SELECT batch_id, idx, user_id, user_ref, object_key FROM pdfqueue_files"
            " WHERE batch_id = $1 AND idx > $2 AND outcome = 'linked' AND object_key IS NOT NULL"
            " ORDER BY idx LIMIT $3",
            batch_id,
            after,
            limit,
        )
        return [_stored(r) for r in rows]

    async def unlink(self, pdfs: Sequence[StoredPdf]) -> tuple[list[str], int]:
        """Set back to NULL each user's link that still points at one of `pdfs`; returns
        the objects no other batch links (those may go) and how many links were unset. A
        link that has changed since is left alone, and so is an object another batch linked
        again."""
        u = self.users
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(
                exclusive_statement(u),
                [p.batch_id for p in pdfs],
                [p.user_id for p in pdfs],
                [p.object_key for p in pdfs],
            )
            keys = [r["object_key"] for r in rows]
            status: str = await conn.execute(
                f"UPDATE {u.ident} SET {u.link} = NULL WHERE {u.id} IN"
                f" (SELECT {u.as_id('x')} FROM unnest($1::{u.files_type}[]) AS x)"
                f" AND {u.link} = ANY($2::text[])",
                [r["user_id"] for r in rows],
                [u.links.link(k) for k in keys],
            )
        return keys, int(status.rsplit(maxsplit=1)[-1])

    async def count_files(self, batch_id: str) -> int:
        n: int = await self.pool.fetchval(
            "SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1", batch_id
        )
        return n

    async def file_indexes(self, batch_id: str, *, after: int, limit: int) -> list[int]:
        """The indexes of up to `limit` of the batch's file rows past `after`, in order."""
        rows = await self.pool.fetch(
            "SELECT idx FROM pdfqueue_files WHERE batch_id = $1 AND idx > $2 ORDER BY idx LIMIT $3",
            batch_id,
            after,
            limit,
        )
        return [int(r["idx"]) for r in rows]

    async def retry_rounds(self, batch_id: str) -> int:
        """How many retry rounds the batch has begun (0 for none, or no batch row)."""
        n: int | None = await self.pool.fetchval(
            "SELECT retries FROM pdfqueue_batches WHERE id = $1", batch_id
        )
        return n or 0

    async def delete_files(self, batch_id: str, *, limit: int) -> int:
        """Delete up to `limit` of the batch's file rows (lowest indexes first); how many."""
        status: str = await self.pool.execute(
            "DELETE FROM pdfqueue_files WHERE batch_id = $1 AND idx IN"
            " (SELECT idx FROM pdfqueue_files WHERE batch_id = $1 ORDER BY idx LIMIT $2)",
            batch_id,
            limit,
        )
        return int(status.rsplit(maxsplit=1)[-1])

    async def delete_batch(self, batch_id: str, record: AuditRecord) -> bool:
        """Delete the batch's row, its callback and delivery records, and write the audit
        record, in one transaction: the record exists exactly when the batch is gone.
        False if the row was gone already (another run finished first)."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "DELETE FROM pdfqueue_webhook_deliveries WHERE batch_id = $1", batch_id
            )
            await conn.execute("DELETE FROM pdfqueue_callbacks WHERE batch_id = $1", batch_id)
            gone = await conn.execute("DELETE FROM pdfqueue_batches WHERE id = $1", batch_id)
            if gone.rsplit(maxsplit=1)[-1] == "0":
                return False
            await _insert_audit(conn, record)
        return True

    # --- a person ---------------------------------------------------------------------------
    async def users_with_email(self, email: str) -> list[tuple[UserId, str | None]]:
        """(id, linked key) of every user row with that address, case-insensitively: the
        key the user's link names when pdfqueue's link template made it, else None."""
        u = self.users
        rows = await self.pool.fetch(
            f"SELECT {u.id} AS id, {u.link} AS link FROM {u.ident}"
            f" WHERE lower({u.email}) = lower($1) ORDER BY {u.id}",
            email,
        )
        return [
            (u.user_id(r["id"]), None if r["link"] is None else u.links.key(r["link"]))
            for r in rows
        ]

    async def files_of_user(
        self, user_id: UserId, *, after: tuple[str, int], limit: int
    ) -> list[StoredPdf | tuple[str, int]]:
        """The file rows matched to `user_id` after (batch, index): a StoredPdf where the
        row linked an object, else the row's (batch, index)."""
        rows = await self.pool.fetch(
            "SELECT batch_id, idx, user_id, user_ref, object_key FROM pdfqueue_files"
            f" WHERE {self.users.files_column} = $1 AND (batch_id, idx) > ($2, $3)"
            " ORDER BY batch_id, idx LIMIT $4",
            user_id,
            *after,
            limit,
        )
        return [_stored(r) if r["object_key"] else (r["batch_id"], r["idx"]) for r in rows]

    async def redact(self, user_id: UserId, rows: Sequence[tuple[str, int]]) -> int:
        """Make the rows say nothing of the person: no name, reason, user or object, the
        outcome (and so every count) kept. Returns how many rows changed."""
        status: str = await self.pool.execute(
            "UPDATE pdfqueue_files f SET name = $4, reason = NULL, previous_reason = NULL,"
            " user_id = NULL, user_ref = NULL, object_key = NULL, sha256 = NULL"
            " FROM unnest($2::text[], $3::int[]) AS r (batch_id, idx)"
            " WHERE f.batch_id = r.batch_id AND f.idx = r.idx"
            f" AND f.{self.users.files_column} = $1",
            user_id,
            [b for b, _ in rows],
            [i for _, i in rows],
            ERASED_NAME,
        )
        return int(status.rsplit(maxsplit=1)[-1])

    async def unlink_user(self, user_id: UserId, object_keys: Sequence[str]) -> bool:
        """Set the user's link back to NULL if it points at one of `object_keys`."""
        u = self.users
        status: str = await self.pool.execute(
            f"UPDATE {u.ident} SET {u.link} = NULL"
            f" WHERE {u.id} = {u.as_id('$1')} AND {u.link} = ANY($2::text[])",
            user_id,
            [u.links.link(k) for k in object_keys],
        )
        return status.rsplit(maxsplit=1)[-1] != "0"

    # --- the audit trail --------------------------------------------------------------------
    async def removal(self, batch_id: str) -> Removal | None:
        """The record of the batch's purge or erasure; None if it was never removed."""
        row = await self.pool.fetchrow(
            f"{_REMOVALS} AND subject = $1 ORDER BY id LIMIT 1", batch_id, list(BATCH_REMOVALS)
        )
        return _removal(row) if row is not None else None

    async def removals_after(self, after_id: int, *, limit: int = 500) -> list[Removal]:
        """The batch removals recorded after record `after_id`, oldest first."""
        rows = await self.pool.fetch(
            f"{_REMOVALS} AND id > $1 ORDER BY id LIMIT $3",
            after_id,
            list(BATCH_REMOVALS),
            limit,
        )
        return [_removal(r) for r in rows]

    async def last_audit_id(self) -> int:
        """The newest audit record's id (0 when there is none): where to watch from."""
        found: int = await self.pool.fetchval("SELECT coalesce(max(id), 0) FROM pdfqueue_audit")
        return found

    async def audit(self, record: AuditRecord) -> None:
        async with self.pool.acquire() as conn:
            await _insert_audit(conn, record)

    async def audit_since(self, since: datetime, *, limit: int = 1000) -> list[AuditRecord]:
        rows = await self.pool.fetch(
            "SELECT at, actor, action, subject, files, objects, bytes FROM pdfqueue_audit"
            " WHERE at >= $1 ORDER BY at, id LIMIT $2",
            since,
            limit,
        )
        return [AuditRecord(**dict(r)) for r in rows]

    async def purge_audit(self, older_than_s: float, *, limit: int = 5000) -> int:
        """Delete up to `limit` audit records older than `older_than_s`; how many."""
        status: str = await self.pool.execute(
            "DELETE FROM pdfqueue_audit WHERE id IN (SELECT id FROM pdfqueue_audit"
            " WHERE at < now() - make_interval(secs => $1) ORDER BY at LIMIT $2)",
            older_than_s,
            limit,
        )
        return int(status.rsplit(maxsplit=1)[-1])

    async def hash_key(self) -> bytes:
        """The installation's key for the audit trail's address hashes, made on first use."""
        await self.pool.execute(
            "INSERT INTO pdfqueue_audit_key (key) VALUES ($1) ON CONFLICT DO NOTHING",
            secrets.token_bytes(32),
        )
        key: bytes = await self.pool.fetchval("SELECT key FROM pdfqueue_audit_key")
        return key


BATCH_REMOVALS = ("purge", "erase_batch")
"""The audit actions that remove a batch (a person's erasure keeps its batches)."""
_REMOVALS = "SELECT id, subject, action, at FROM pdfqueue_audit WHERE action = ANY($2::text[])"

# $1 batches, $2 users, $3 objects (one entry per stored PDF): those whose object no row of
# another batch links, with the user whose link points at it.
_EXCLUSIVE = """
SELECT p.user_id, p.object_key FROM unnest($1::text[], $2::{files_type}[], $3::text[])
    AS p (batch_id, user_id, object_key)
WHERE NOT EXISTS (
    SELECT 1 FROM pdfqueue_files f
    WHERE f.{user_col} = p.user_id AND f.object_key = p.object_key AND f.batch_id <> p.batch_id
)
"""


def exclusive_statement(users: UsersTable) -> str:
    """`_EXCLUSIVE` for the users table's ids."""
    return _EXCLUSIVE.format(files_type=users.files_type, user_col=users.files_column)


async def _insert_audit(conn: asyncpg.Connection, r: AuditRecord) -> None:
    await conn.execute(
        "INSERT INTO pdfqueue_audit (at, actor, action, subject, files, objects, bytes)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)",
        r.at,
        r.actor,
        r.action,
        r.subject,
        r.files,
        r.objects,
        r.bytes,
    )


def _ended(row: asyncpg.Record) -> EndedBatch:
    return EndedBatch(row["id"], row["tenant"], row["source_key"], row["status"], row["erasing"])


def _stored(row: asyncpg.Record) -> StoredPdf:
    user_id = row["user_id"] if row["user_id"] is not None else row["user_ref"]
    return StoredPdf(row["batch_id"], row["idx"], user_id, row["object_key"])


def _removal(row: asyncpg.Record) -> Removal:
    return Removal(row["id"], row["subject"], row["action"], row["at"])
