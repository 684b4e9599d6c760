"""PostgreSQL: the pool and every query pdfqueue runs (the durable record); migrations: schema."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg

from pdfqueue.domain.errors import (
    BatchNotFound,
    BatchNotRetryable,
    DependencyRejected,
    is_transient,
)
from pdfqueue.domain.models import (
    COUNTERS,
    BatchStatus,
    BatchSummary,
    Claim,
    Decision,
    FileQuery,
    FileRef,
    FileResult,
    Outcome,
    ReasonCount,
    RetryRound,
    failed,
)
from pdfqueue.domain.names import safe_name
from pdfqueue.stores.drivers import postgres_errors, typed_call, typed_methods

log = logging.getLogger(__name__)
LEGACY_QUEUE = "pdfqueue:queue"
"""The default queue: batches created before rows recorded their queue (0008) count as its."""


def quote_ident(name: str) -> str:
    """Quote a validated `[schema.]table` name (see Settings.users_table)."""
    return ".".join(f'"{part}"' for part in name.split("."))


@typed_call(postgres_errors)
async def connect(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=5,
        command_timeout=15,
        reset=_keep_session,
    )
    return pool


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to reset when a connection goes back to the pool.

    asyncpg's default runs `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`,
    one more round trip after every pooled query. pdfqueue never changes session state (no
    SET, LISTEN, cursors or session-level locks), and asyncpg still rolls back a
    transaction left open before calling this.
    """


@dataclass(frozen=True)
class UserRow:
    id: int
    email: str
    pdf_url: str | None


@typed_methods(postgres_errors)
@dataclass(frozen=True)
class Database:
    """Queries over one pool; `users_table` is the host application's table.

    With `tenant_column` set, every query of that table also requires the column to equal
    the tenant of the batch being processed, read from the batch's own row in the same
    statement: a batch can neither see nor link another tenant's users.
    """

    pool: asyncpg.Pool
    users_table: str
    tenant_column: str | None = None

    async def check(self) -> None:
        await self.pool.fetchval("SELECT 1")

    async def check_users_table(self) -> None:
        """Raise unless the host application's table has the columns pdfqueue reads."""
        tenant = f", {quote_ident(self.tenant_column)}" if self.tenant_column else ""
        await self.pool.execute(
            f"SELECT id, email, pdf_url{tenant} FROM {quote_ident(self.users_table)} LIMIT 0"
        )

    def _batch_scope(self, batch_param: str) -> str:
        """SQL restricting the users table to the tenant of the batch in `batch_param`."""
        if self.tenant_column is None:
            return ""
        return (
            f" AND {quote_ident(self.tenant_column)} ="
            f" (SELECT tenant FROM pdfqueue_batches WHERE id = {batch_param})"
        )

    # --- batches --------------------------------------------------------------------------
    async def create_batch(
        self,
        batch_id: str,
        tenant: str,
        source_key: str,
        *,
        pdfbatch_uid: str | None = None,
        file_name: str | None = None,
        queue_name: str | None = None,
    ) -> BatchRow:
        """Insert the batch, or return the existing row unchanged (whoever it belongs to)."""
        row = await self.pool.fetchrow(
            "INSERT INTO pdfqueue_batches"
            " (id, tenant, source_key, status, pdfbatch_uid, file_name, queue_name)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7)"
            " ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id RETURNING *",
            batch_id,
            tenant,
            source_key,
            BatchStatus.PENDING.value,
            pdfbatch_uid,
            file_name,
            queue_name,
        )
        return _batch_row(row)

    async def bind_pdfbatch(
        self, batch_id: str, pdfbatch_uid: str, *, tenant: str, source_key: str
    ) -> BatchRow | None:
        """Bind the batch to the PdfBatch `pdfbatch_uid`, once: a compare-and-set.

        Succeeds only if the batch has this tenant and source and is bound to no object yet
        (a batch the API created) or to this one already; None otherwise. A concurrent
        claim waits for the row lock and then finds it bound to the winner.
        """
        row = await self.pool.fetchrow(
            "UPDATE pdfqueue_batches SET pdfbatch_uid = $2 WHERE id = $1 AND tenant = $3"
            " AND source_key = $4 AND (pdfbatch_uid IS NULL OR pdfbatch_uid = $2) RETURNING *",
            batch_id,
            pdfbatch_uid,
            tenant,
            source_key,
        )
        return _batch_row(row) if row is not None else None

    async def pdfbatch_uid(self, batch_id: str) -> str | None:
        """The uid of the PdfBatch the batch is bound to (None if unbound or unknown)."""
        uid: str | None = await self.pool.fetchval(
            "SELECT pdfbatch_uid FROM pdfqueue_batches WHERE id = $1", batch_id
        )
        return uid

    async def list_batches(
        self, tenant: str, *, before: tuple[datetime, str] | None, limit: int
    ) -> list[BatchSummary]:
        """`tenant`'s batches newest first, those strictly older than `before` (created, id).

        Counters of unfinished batches are those of the row (zero until final): callers
        overlay the live state.
        """
        after_clause = " AND (created_at, id) < ($2, $3)" if before else ""
        rows = await self.pool.fetch(
            "SELECT * FROM pdfqueue_batches WHERE tenant = $1 AND erasing_at IS NULL"
            f"{after_clause} ORDER BY created_at DESC, id DESC LIMIT ${4 if before else 2}",
            tenant,
            *(before or ()),
            limit,
        )
        return [_summary(r) for r in rows]

    async def active_batches(self, tenant: str, uploading: Sequence[str] = ()) -> int:
        """Batches of `tenant` not yet terminal, plus those of `uploading` (uploads and
        retries in flight) that are not among them yet.

        Derived from the durable rows (an index keeps it cheap), so a crash never leaks a
        count, and an upload that just became a batch is counted once, whichever it is.
        """
        count: int = await self.pool.fetchval(_ACTIVE_BATCHES, tenant, list(uploading))
        return count

    async def processing_batches(self, limit: int = 10_000) -> list[str]:
        """Ids of up to `limit` PROCESSING batches, read through the index of unfinished ones."""
        rows = await self.pool.fetch(_PROCESSING_BATCHES, limit)
        return [r["id"] for r in rows]

    async def activity(
        self,
        *,
        tenant: str | None = None,
        running: bool = True,
        limit: int | None = None,
        queue_name: str | None = None,
        batch_ids: Sequence[str] | None = None,
    ) -> list[BatchActivity]:
        """Batches of every tenant (or of `tenant`), newest first, each with its files that
        have an outcome and when one was last recorded; only those still running (PENDING,
        PROCESSING) unless not `running`, only those of `queue_name` when given (with
        those of no recorded queue for LEGACY_QUEUE), only `batch_ids` when given. For
        operators (`pdfqueue admin`, the reconciler)."""
        where: list[str] = []
        args: list[Any] = []
        if batch_ids is not None:
            args.append(list(batch_ids))
            where.append(f"id = ANY(${len(args)}::text[])")
        if queue_name is not None:
            args.append(queue_name)
            legacy = " OR queue_name IS NULL" if queue_name == LEGACY_QUEUE else ""
            where.append(f"(queue_name = ${len(args)}{legacy})")
        if running:  # the predicate of index pdfqueue_batches_active (0002), word for word
            where.append("status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')")
        if tenant is not None:
            args.append(tenant)
            where.append(f"tenant = ${len(args)}")
        args.append(limit)
        rows = await self.pool.fetch(
            _ACTIVITY.format(where=" AND ".join(where) or "true", limit=f"${len(args)}"), *args
        )
        return [BatchActivity(_batch_row(r), r["recorded"], r["last_recorded_at"]) for r in rows]

    async def delete_batch(self, batch_id: str) -> None:
        await self.pool.execute("DELETE FROM pdfqueue_batches WHERE id = $1", batch_id)

    async def batch(self, batch_id: str) -> BatchRow | None:
        """The batch's row; counters come from the per-file rows until final. None for a
        batch being erased, as for an unknown one."""
        row = await self.pool.fetchrow(
            "SELECT * FROM pdfqueue_batches WHERE id = $1 AND erasing_at IS NULL", batch_id
        )
        if row is None:
            return None
        found = _batch_row(row)
        if found.summary.status in {BatchStatus.COMPLETED, BatchStatus.FAILED}:
            return found
        counts = await self.outcome_counts(batch_id)
        update = {**counts, "processed": sum(counts.values())}
        return replace(found, summary=found.summary.model_copy(update=update))

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
            " completed_at = COALESCE(completed_at, now()), processed = $4, "
            + ", ".join(f"{c} = ${i}" for i, c in enumerate(COUNTERS, start=5))
            + " WHERE id = $1 RETURNING *",
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
            " AND outcome NOT IN ('ignored', 'retrying') GROUP BY outcome",
            batch_id,
        )
        counts = dict.fromkeys(COUNTERS, 0)
        counts.update({r["outcome"]: r["n"] for r in rows})
        return counts

    async def outcomes(self, batch_id: str) -> dict[int, str]:
        rows = await self.pool.fetch(
            "SELECT idx, outcome FROM pdfqueue_files WHERE batch_id = $1"
            " AND outcome NOT IN ('ignored', 'retrying')",
            batch_id,
        )
        return {r["idx"]: r["outcome"] for r in rows}

    # --- files ----------------------------------------------------------------------------
    # Every per-file write has a path that cannot fail on the file's own data: names go in as
    # `safe_name` renders them, and a statement PostgreSQL refuses for what it carries
    # (`DependencyRejected`) is tried again one file at a time; a file refused on its own is
    # recorded `failed` with the refusal's reason under a name of pdfqueue's own making.

    async def record_ignored(self, batch_id: str, members: Sequence[tuple[int, str, str]]) -> None:
        """Members reported but not counted (not PDFs by name): (index, name, reason)."""
        rows = [(batch_id, i, safe_name(n), r) for i, n, r in members]
        try:
            with postgres_errors():
                await self.pool.executemany(_RECORD_IGNORED, rows)
        except DependencyRejected:
            for row in rows:
                try:
                    with postgres_errors():
                        await self.pool.execute(_RECORD_IGNORED, *row)
                except DependencyRejected as exc:
                    await self.pool.execute(
                        _RECORD_IGNORED, batch_id, row[1], placeholder_name(row[1]), exc.reason
                    )

    async def record_files(
        self, batch_id: str, rows: Mapping[FileRef, Decision]
    ) -> dict[int, Decision]:
        """Store each file's outcome once, in one statement; returns what is stored for each.

        A retry gets back what the first try stored (`_with_earlier`).
        """
        if not rows:
            return {}
        try:
            with postgres_errors():
                found = await self._record_many(batch_id, rows)
        except DependencyRejected:
            found = []
            for ref, decision in rows.items():
                try:
                    with postgres_errors():
                        found += await self._record_many(batch_id, {ref: decision})
                except DependencyRejected as exc:
                    found += await self._record_refused(batch_id, ref, exc)
        stored = await self._with_earlier(batch_id, found, [ref.index for ref in rows])
        return {idx: _decision(row) for idx, row in stored.items()}

    async def _record_many(self, batch_id: str, rows: Mapping[FileRef, Decision]) -> list[Any]:
        found: list[Any] = await self.pool.fetch(
            _RECORD_MANY,
            batch_id,
            [ref.index for ref in rows],
            [safe_name(ref.name) for ref in rows],
            [d.outcome.value for d in rows.values()],
            [d.reason for d in rows.values()],
            [d.user_id for d in rows.values()],
            [d.sha256 for d in rows.values()],
            [d.ocr for d in rows.values()],
        )
        return found

    async def _record_refused(
        self, batch_id: str, ref: FileRef, exc: DependencyRejected
    ) -> list[Any]:
        """The row of a file PostgreSQL refused: `failed` with the refusal's reason, and its
        name; if even that row is refused, under a name of pdfqueue's own making (then
        nothing of the file's own is written)."""
        log.warning(
            "file %d refused by the database (%s): recorded failed",
            ref.index,
            exc.reason,
            extra={"batch_id": batch_id},
        )
        try:
            with postgres_errors():
                return await self._record_many(batch_id, {ref: failed(exc.reason)})
        except DependencyRejected:
            bare = FileRef(batch_id, ref.index, placeholder_name(ref.index))
            return await self._record_many(batch_id, {bare: failed(exc.reason)})

    async def _with_earlier(
        self, batch_id: str, found: list[Any], indexes: Sequence[int]
    ) -> dict[int, Any]:
        """The rows a statement wrote (`found`), and the rows of the other `indexes` that were
        there already (an earlier try's or a concurrent delivery's), read in a second statement."""
        rows = {f["idx"]: f for f in found}
        if missing := [i for i in indexes if i not in rows]:
            rows.update(
                (f["idx"], f) for f in await self.pool.fetch(_READ_FILES, batch_id, missing)
            )
        return rows

    async def claim(self, claims: Sequence[Claim]) -> dict[FileRef, Decision]:
        """Link each user to its object only if nobody has, and record the files.

        One statement links a run of users at once: their rows are locked in id order (so
        racing workers never deadlock) and, having waited for the locks, each is decided
        on its latest committed value: one file links, the others see that link
        (`duplicate` when it is the same content, else `already_linked`). A user claimed
        twice in the run goes in a second statement, decided on the first's link. A retry
        after a crash finds its own earlier rows and claims nothing. A run PostgreSQL
        refuses for what it carries is claimed again a file at a time; a file refused on its
        own links nobody and is recorded `failed` (`_record_refused`).
        """
        stored: dict[FileRef, Decision] = {}
        for run in _distinct_users(claims):
            batch_id = run[0].ref.batch_id
            try:
                with postgres_errors():
                    found = await self._claim_run(run)
            except DependencyRejected:
                found = []
                for one in run:
                    try:
                        with postgres_errors():
                            found += await self._claim_run([one])
                    except DependencyRejected as exc:
                        found += await self._record_refused(batch_id, one.ref, exc)
            rows = await self._with_earlier(batch_id, found, [c.ref.index for c in run])
            for c in run:
                row = rows[c.ref.index]
                stored[c.ref] = Decision(
                    Outcome(row["outcome"]),
                    row["reason"],
                    c.user_id,
                    c.sha256,
                    stored=True,
                    ocr=c.ocr,
                )
        return stored

    async def _claim_run(self, run: Sequence[Claim]) -> list[Any]:
        found: list[Any] = await self.pool.fetch(
            _CLAIM.format(users=quote_ident(self.users_table), scope=self._batch_scope("$1")),
            run[0].ref.batch_id,
            [c.ref.index for c in run],
            [safe_name(c.ref.name) for c in run],
            [c.user_id for c in run],
            [c.object_key for c in run],
            [c.sha256 for c in run],
            [c.ocr for c in run],
        )
        return found

    async def begin_retry(self, batch_id: str, *, all_failed: bool) -> RetryRound:
        """The durable step of a retry round, in one transaction under the batch row's lock:
        the chosen failed files become `retrying` (one more try, the old reason kept) and
        the batch PROCESSING, so racing calls start one round. A round still running is
        returned as not `started`."""
        async with self.pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                "SELECT status, retries, source_key FROM pdfqueue_batches WHERE id = $1 FOR UPDATE",
                batch_id,
            )
            if row is None:
                raise BatchNotFound(batch_id)
            status = BatchStatus(row["status"])
            if status is BatchStatus.PROCESSING and row["retries"] > 0:
                return RetryRound(batch_id, row["retries"], row["source_key"], started=False)
            if status is not BatchStatus.COMPLETED:
                raise BatchNotRetryable(batch_id, f"it is {status.value}, not COMPLETED")
            if not await _mark_retrying(conn, batch_id, all_failed=all_failed):
                which = "failed" if all_failed else "transiently failed"
                raise BatchNotRetryable(batch_id, f"it has no {which} file")
            number: int = await conn.fetchval(
                "UPDATE pdfqueue_batches SET status = 'PROCESSING', retries = retries + 1,"
                " completed_at = NULL, error = NULL WHERE id = $1 RETURNING retries",
                batch_id,
            )
            return RetryRound(batch_id, number, row["source_key"], started=True)

    async def retrying_files(self, batch_id: str) -> dict[int, str]:
        """The files a retry round still has to decide: index -> name."""
        rows = await self.pool.fetch(
            "SELECT idx, name FROM pdfqueue_files WHERE batch_id = $1 AND outcome = 'retrying'",
            batch_id,
        )
        return {r["idx"]: r["name"] for r in rows}

    async def files(self, batch_id: str, *, after: int = -1, limit: int = 1000) -> list[FileResult]:
        rows = await self.pool.fetch(
            f"SELECT idx, {', '.join(_FILE_COLUMNS)} FROM pdfqueue_files"
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

    async def file_page(self, batch_id: str, query: FileQuery) -> tuple[int, list[FileResult]]:
        """(rows matching the query's filters, the requested page of them)."""
        where, args = _file_filters(batch_id, query)
        total: int = await self.pool.fetchval(
            f"SELECT count(*) FROM pdfqueue_files WHERE {where}", *args
        )
        rows = await self.pool.fetch(
            f"SELECT idx, {', '.join(_FILE_COLUMNS)} FROM pdfqueue_files"
            f" WHERE {where} ORDER BY {_FILE_ORDER[query.sort]}"
            f" OFFSET ${len(args) + 1} LIMIT ${len(args) + 2}",
            *args,
            query.offset,
            query.limit,
        )
        files = [FileResult(index=r["idx"], **{k: r[k] for k in _FILE_COLUMNS}) for r in rows]
        return total, files

    async def reason_counts(self, batch_id: str) -> list[ReasonCount]:
        rows = await self.pool.fetch(
            "SELECT outcome, reason, count(*) AS n FROM pdfqueue_files WHERE batch_id = $1"
            " GROUP BY outcome, reason ORDER BY outcome, reason NULLS FIRST",
            batch_id,
        )
        return [ReasonCount(outcome=r["outcome"], reason=r["reason"], files=r["n"]) for r in rows]

    # --- users (the host application's table) ------------------------------------------------
    async def users_by_email(self, emails: Sequence[str], *, batch_id: str) -> dict[str, UserRow]:
        """Users whose lower-cased email is one of `emails` (index `lower(email)` for speed),
        among those `batch_id` may see (its tenant's, when the table has a tenant column)."""
        scoped = self.tenant_column is not None
        rows = await self.pool.fetch(
            f"SELECT id, lower(email) AS email, pdf_url FROM {quote_ident(self.users_table)}"
            f" WHERE lower(email) = ANY($1::text[]){self._batch_scope('$2')}",
            list(emails),
            *([batch_id] if scoped else []),
        )
        return {r["email"]: UserRow(r["id"], r["email"], r["pdf_url"]) for r in rows}


@dataclass(frozen=True)
class BatchRow:
    """A batch's durable row: its summary and who it belongs to."""

    summary: BatchSummary
    tenant: str
    source_key: str
    pdfbatch_uid: str | None


@dataclass(frozen=True)
class BatchActivity:
    """A batch as PostgreSQL sees it now: its row, how many of its files have an outcome
    (those of a retry round's files that are `retrying` do not), and when a file's row was
    last written (None before the first)."""

    row: BatchRow
    recorded: int
    last_recorded_at: datetime | None

    @property
    def unrecorded(self) -> int | None:
        """Files still without an outcome; None while the ZIP has not been listed."""
        total = self.row.summary.total_files
        return None if total is None else max(total - self.recorded, 0)


_ACTIVITY = """
SELECT b.*, COALESCE(f.recorded, 0) AS recorded, f.last_recorded_at
FROM pdfqueue_batches b
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE outcome NOT IN ('ignored', 'retrying')) AS recorded,
        max(recorded_at) AS last_recorded_at
    FROM pdfqueue_files WHERE batch_id = b.id
) f ON true
WHERE {where} ORDER BY b.created_at DESC, b.id DESC LIMIT {limit}
"""


def _batch_row(row: Any) -> BatchRow:
    return BatchRow(_summary(row), row["tenant"], row["source_key"], row["pdfbatch_uid"])


async def _mark_retrying(conn: Any, batch_id: str, *, all_failed: bool) -> int:
    """Mark the failed files to re-run `retrying`, keeping their history; returns how many."""
    rows = await conn.fetch(
        "SELECT idx, reason FROM pdfqueue_files WHERE batch_id = $1 AND outcome = 'failed'",
        batch_id,
    )
    chosen = [r["idx"] for r in rows if all_failed or is_transient(r["reason"])]
    if chosen:
        await conn.execute(
            "UPDATE pdfqueue_files SET outcome = 'retrying', tries = tries + 1,"
            " previous_reason = reason, reason = NULL, user_id = NULL, object_key = NULL,"
            " sha256 = NULL, ocr = false, recorded_at = now()"
            " WHERE batch_id = $1 AND idx = ANY($2::int[])",
            batch_id,
            chosen,
        )
    return len(chosen)


def _decision(row: Any) -> Decision:
    """The outcome and reason a file's row holds."""
    return Decision(Outcome(row["outcome"]), row["reason"], stored=True)


_RECORD_IGNORED = (
    "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome, reason)"
    " VALUES ($1, $2, $3, 'ignored', $4) ON CONFLICT DO NOTHING"
)


def placeholder_name(index: int) -> str:
    """The name a file's row gets when PostgreSQL refused the one from its ZIP."""
    return f"(member {index}: name not stored)"


_RECORD_MANY = """
WITH r AS (
    SELECT * FROM unnest(
        $2::int[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::bool[]
    ) AS r (idx, name, outcome, reason, user_id, sha256, ocr)
), ins AS (
    INSERT INTO pdfqueue_files (batch_id, idx, name, outcome, reason, user_id, sha256, ocr)
    SELECT $1, idx, name, outcome, reason, user_id, sha256, ocr FROM r
    ON CONFLICT (batch_id, idx) DO UPDATE SET outcome = EXCLUDED.outcome,
        reason = EXCLUDED.reason, user_id = EXCLUDED.user_id, sha256 = EXCLUDED.sha256,
        ocr = EXCLUDED.ocr, recorded_at = now()
    WHERE pdfqueue_files.outcome = 'retrying'
    RETURNING idx, outcome, reason
)
SELECT idx, outcome, reason FROM ins
"""
"""A file's row goes in once, or replaces the row of a file a retry re-runs (`retrying`,
0005). The rows that were there already are read in a second statement: reading them here,
by the statement's files, let the planner scan every row of the batch when its statistics
predated the batch (an index-only scan of `pdfqueue_files_by_outcome`)."""

# The predicate is the one of index pdfqueue_batches_active (0002), word for word.
# PostgreSQL proves that status = 'PROCESSING' implies pdfqueue_batches_active's predicate, so
# this reads that index of unfinished batches, never the whole history.
_PROCESSING_BATCHES = """
SELECT id FROM pdfqueue_batches WHERE status = 'PROCESSING' LIMIT $1
"""

# An id in flight counts unless it is one of the tenant's unfinished rows (counted already):
# an upload before its row exists, a retry before its finished row is PROCESSING again.
_ACTIVE_BATCHES = """
SELECT (SELECT count(*) FROM pdfqueue_batches
        WHERE tenant = $1 AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED'))
     + (SELECT count(DISTINCT u.id) FROM unnest($2::text[]) AS u (id)
        WHERE NOT EXISTS (SELECT 1 FROM pdfqueue_batches b WHERE b.id = u.id AND b.tenant = $1
                          AND b.status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')))
"""

_READ_FILES = (
    "SELECT idx, outcome, reason FROM pdfqueue_files WHERE batch_id = $1 AND idx = ANY($2::int[])"
)

# $1 batch; per file: $2 index, $3 name, $4 user id, $5 object key, $6 sha256, $7 ocr (each user
# once). `u` locks the users' rows in id order and, having waited for them, reads their latest
# committed pdf_url; the files' rows go in first, and only a row that went in (not a retry's
# second delivery, whose rows are read by `_with_earlier`) links its user. `u` is scoped to the
# batch's tenant, so `l` is too.
_CLAIM = """
WITH c AS (
    SELECT * FROM unnest(
        $2::int[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bool[]
    ) AS c (idx, name, user_id, object_key, sha256, ocr)
), u AS (
    SELECT id, pdf_url FROM {users}
    WHERE id IN (SELECT user_id FROM c){scope} ORDER BY id FOR UPDATE
), d AS (
    SELECT c.*,
        CASE WHEN u.id IS NULL THEN 'skipped_no_match'
             WHEN u.pdf_url IS NULL THEN 'linked'
             ELSE 'skipped_already_exists' END AS outcome,
        CASE WHEN u.id IS NULL THEN 'no_user'
             WHEN u.pdf_url IS NULL THEN NULL
             WHEN u.pdf_url = c.object_key THEN 'duplicate'
             ELSE 'already_linked' END AS reason
    FROM c LEFT JOIN u ON u.id = c.user_id
), ins AS (
    INSERT INTO pdfqueue_files
        (batch_id, idx, name, outcome, reason, user_id, object_key, sha256, ocr)
    SELECT $1, idx, name, outcome, reason, user_id,
        CASE WHEN outcome = 'linked' THEN object_key END, sha256, ocr
    FROM d ORDER BY idx
    ON CONFLICT (batch_id, idx) DO UPDATE SET outcome = EXCLUDED.outcome,
        reason = EXCLUDED.reason, user_id = EXCLUDED.user_id,
        object_key = EXCLUDED.object_key, sha256 = EXCLUDED.sha256, ocr = EXCLUDED.ocr,
        recorded_at = now()
    WHERE pdfqueue_files.outcome = 'retrying'
    RETURNING idx, outcome, reason, user_id, object_key
), linked AS (
    UPDATE {users} SET pdf_url = l.linked_key
    FROM (SELECT user_id, object_key FROM ins WHERE outcome = 'linked')
        AS l (linked_user, linked_key)
    WHERE id = l.linked_user
)
SELECT idx, outcome, reason FROM ins
"""


def _distinct_users(claims: Sequence[Claim]) -> list[list[Claim]]:
    """The claims in runs that each name a user once, in order: the n-th claim of a user
    goes in the n-th run."""
    runs: list[list[Claim]] = []
    seen: dict[int, int] = {}
    for c in claims:
        n = seen.get(c.user_id, 0)
        seen[c.user_id] = n + 1
        if n == len(runs):
            runs.append([])
        runs[n].append(c)
    return runs


_FILE_ORDER = {
    "index": "idx",
    "-index": "idx DESC",
    "name": "name, idx",
    "-name": "name DESC, idx DESC",
    "outcome": "outcome, reason, idx",
    "-outcome": "outcome DESC, reason DESC, idx DESC",
}
"""Each sort of FILE_SORTS as SQL (never built from input): each an index order (0003)."""


def _file_filters(batch_id: str, query: FileQuery) -> tuple[str, list[Any]]:
    """The WHERE clause of a report query and its arguments: only placeholders take input."""
    clauses, args = ["batch_id = $1"], [batch_id]
    if query.outcome is not None:
        args.append(query.outcome)
        clauses.append(f"outcome = ${len(args)}")
    if query.reason is not None:
        args.append(query.reason)
        clauses.append(f"reason = ${len(args)}")
    if query.search:
        args.append("%" + _like_escape(query.search) + "%")
        clauses.append(f"name ILIKE ${len(args)}")
    return " AND ".join(clauses), args


def _like_escape(text: str) -> str:
    r"""`text` matched literally by LIKE: its `%`, `_` and `\` are escaped."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_FILE_COLUMNS = (
    "name",
    "outcome",
    "reason",
    "user_id",
    "object_key",
    "sha256",
    "ocr",
    "tries",
    "previous_reason",
)


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
        file_name=row.get("file_name"),
        retries=row.get("retries") or 0,
        **{c: row[c] for c in COUNTERS},
    )
