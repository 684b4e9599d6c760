"""PostgreSQL: the files' rows (each outcome recorded once, claims, retry rounds, the report)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import asyncpg

from pdfqueue.domain.errors import (
    BatchNotFound,
    BatchNotRetryable,
    DependencyRejected,
    is_transient,
)
from pdfqueue.domain.models import (
    BatchStatus,
    Claim,
    Decision,
    FileQuery,
    FileRef,
    FileResult,
    Outcome,
    ReasonCount,
    RetryRound,
    UserId,
    failed,
)
from pdfqueue.domain.names import safe_name
from pdfqueue.stores.driver_errors import postgres_errors, typed_methods
from pdfqueue.stores.postgres.pool import UsersTable

log = logging.getLogger(__name__)


@typed_methods(postgres_errors)
@dataclass(frozen=True)
class FileStore:
    """The rows of `pdfqueue_files`, one per member of a batch's ZIP; a claim also links the
    user in `users` (the host application's table, scoped to the batch's tenant if set).

    Every per-file write has a path that cannot fail on the file's own data: names go in as
    `safe_name` renders them, and a statement PostgreSQL refuses for what it carries
    (`DependencyRejected`) is tried again one file at a time; a file refused on its own is
    recorded `failed` with the refusal's reason under a name of pdfqueue's own making.
    """

    pool: asyncpg.Pool
    users: UsersTable

    @cached_property
    def _record_sql(self) -> str:
        u = self.users
        return _RECORD_MANY.format(files_type=u.files_type, user_col=u.files_column)

    @cached_property
    def _claim_sql(self) -> str:
        u = self.users
        return _CLAIM.format(
            users=u.ident,
            scope=u.scope("$1"),
            id=u.id,
            link=u.link,
            files_type=u.files_type,
            user_col=u.files_column,
            c_user=u.as_id("c.user_id"),
            l_user=u.as_id("l.linked_user"),
        )

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

    async def record(self, batch_id: str, rows: Mapping[FileRef, Decision]) -> dict[int, Decision]:
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
            self._record_sql,
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
            self._claim_sql,
            run[0].ref.batch_id,
            [c.ref.index for c in run],
            [safe_name(c.ref.name) for c in run],
            [c.user_id for c in run],
            [c.object_key for c in run],
            [c.sha256 for c in run],
            [c.ocr for c in run],
            self.users.links.before,
            self.users.links.after,
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

    async def retrying(self, batch_id: str) -> dict[int, str]:
        """The files a retry round still has to decide: index -> name."""
        rows = await self.pool.fetch(
            "SELECT idx, name FROM pdfqueue_files WHERE batch_id = $1 AND outcome = 'retrying'",
            batch_id,
        )
        return {r["idx"]: r["name"] for r in rows}

    async def read(self, batch_id: str, *, after: int = -1, limit: int = 1000) -> list[FileResult]:
        rows = await self.pool.fetch(
            f"SELECT {_FILE_COLUMNS} FROM pdfqueue_files"
            " WHERE batch_id = $1 AND idx > $2 ORDER BY idx LIMIT $3",
            batch_id,
            after,
            limit,
        )
        return [_file_result(r) for r in rows]

    async def page(self, batch_id: str, query: FileQuery) -> tuple[int, list[FileResult]]:
        """(rows matching the query's filters, the requested page of them)."""
        where, args = _file_filters(batch_id, query)
        total: int = await self.pool.fetchval(
            f"SELECT count(*) FROM pdfqueue_files WHERE {where}", *args
        )
        rows = await self.pool.fetch(
            f"SELECT {_FILE_COLUMNS} FROM pdfqueue_files"
            f" WHERE {where} ORDER BY {_FILE_ORDER[query.sort]}"
            f" OFFSET ${len(args) + 1} LIMIT ${len(args) + 2}",
            *args,
            query.offset,
            query.limit,
        )
        return total, [_file_result(r) for r in rows]

    async def reason_counts(self, batch_id: str) -> list[ReasonCount]:
        rows = await self.pool.fetch(
            "SELECT outcome, reason, count(*) AS n FROM pdfqueue_files WHERE batch_id = $1"
            " GROUP BY outcome, reason ORDER BY outcome, reason NULLS FIRST",
            batch_id,
        )
        return [ReasonCount(outcome=r["outcome"], reason=r["reason"], files=r["n"]) for r in rows]

    async def outcomes(self, batch_id: str) -> dict[int, str]:
        rows = await self.pool.fetch(
            "SELECT idx, outcome FROM pdfqueue_files WHERE batch_id = $1"
            " AND outcome NOT IN ('ignored', 'retrying')",
            batch_id,
        )
        return {r["idx"]: r["outcome"] for r in rows}


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
            " previous_reason = reason, reason = NULL, user_id = NULL, user_ref = NULL,"
            " object_key = NULL,"
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
        $2::int[], $3::text[], $4::text[], $5::text[], $6::{files_type}[], $7::text[], $8::bool[]
    ) AS r (idx, name, outcome, reason, user_id, sha256, ocr)
), ins AS (
    INSERT INTO pdfqueue_files (batch_id, idx, name, outcome, reason, {user_col}, sha256, ocr)
    SELECT $1, idx, name, outcome, reason, user_id, sha256, ocr FROM r
    ON CONFLICT (batch_id, idx) DO UPDATE SET outcome = EXCLUDED.outcome,
        reason = EXCLUDED.reason, {user_col} = EXCLUDED.{user_col}, sha256 = EXCLUDED.sha256,
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

_READ_FILES = (
    "SELECT idx, outcome, reason FROM pdfqueue_files WHERE batch_id = $1 AND idx = ANY($2::int[])"
)

# $1 batch; per file: $2 index, $3 name, $4 user id, $5 object key, $6 sha256, $7 ocr (each user
# once); $8 and $9 the link's text before and after the key. `u` locks the users' rows in id
# order and, having waited for them, reads their latest committed link; the files' rows go in
# first, and only a row that went in (not a retry's second delivery, whose rows are read by
# `_with_earlier`) links its user. `u` is scoped to the batch's tenant, so `l` is too. The
# table's own names and types come from UsersTable (settings, validated), never from input.
_CLAIM = """
WITH c AS (
    SELECT * FROM unnest(
        $2::int[], $3::text[], $4::{files_type}[], $5::text[], $6::text[], $7::bool[]
    ) AS c (idx, name, user_id, object_key, sha256, ocr)
), u AS (
    SELECT {id} AS id, {link} AS link FROM {users}
    WHERE {id} IN (SELECT {c_user} FROM c){scope} ORDER BY {id} FOR UPDATE
), d AS (
    SELECT c.*,
        CASE WHEN u.id IS NULL THEN 'skipped_no_match'
             WHEN u.link IS NULL THEN 'linked'
             ELSE 'skipped_already_exists' END AS outcome,
        CASE WHEN u.id IS NULL THEN 'no_user'
             WHEN u.link IS NULL THEN NULL
             WHEN u.link = $8 || c.object_key || $9 THEN 'duplicate'
             ELSE 'already_linked' END AS reason
    FROM c LEFT JOIN u ON u.id = {c_user}
), ins AS (
    INSERT INTO pdfqueue_files
        (batch_id, idx, name, outcome, reason, {user_col}, object_key, sha256, ocr)
    SELECT $1, idx, name, outcome, reason, user_id,
        CASE WHEN outcome = 'linked' THEN object_key END, sha256, ocr
    FROM d ORDER BY idx
    ON CONFLICT (batch_id, idx) DO UPDATE SET outcome = EXCLUDED.outcome,
        reason = EXCLUDED.reason, {user_col} = EXCLUDED.{user_col},
        object_key = EXCLUDED.object_key, sha256 = EXCLUDED.sha256, ocr = EXCLUDED.ocr,
        recorded_at = now()
    WHERE pdfqueue_files.outcome = 'retrying'
    RETURNING idx, outcome, reason, {user_col} AS user_id, object_key
), linked AS (
    UPDATE {users} SET {link} = $8 || l.linked_key || $9
    FROM (SELECT user_id, object_key FROM ins WHERE outcome = 'linked')
        AS l (linked_user, linked_key)
    WHERE {id} = {l_user}
)
SELECT idx, outcome, reason FROM ins
"""


def _distinct_users(claims: Sequence[Claim]) -> list[list[Claim]]:
    """The claims in runs that each name a user once, in order: the n-th claim of a user
    goes in the n-th run."""
    runs: list[list[Claim]] = []
    seen: dict[UserId, int] = {}
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
    "idx, name, outcome, reason, user_id, user_ref, object_key, sha256, ocr, tries, previous_reason"
)
_REPORTED = ("name", "outcome", "reason", "object_key", "sha256", "ocr", "tries", "previous_reason")


def _file_result(row: asyncpg.Record) -> FileResult:
    """A report row; the user's id as the users table has it: an integer (`user_id`), or
    the text of a UUID or text id (`user_ref`, 0012)."""
    user_id = row["user_id"] if row["user_id"] is not None else row["user_ref"]
    return FileResult(index=row["idx"], user_id=user_id, **{k: row[k] for k in _REPORTED})
