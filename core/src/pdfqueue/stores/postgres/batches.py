"""PostgreSQL: the batches' durable rows (creation, binding, listing, start, final summary)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg

from pdfqueue.domain.models import COUNTERS, BatchStatus, BatchSummary
from pdfqueue.stores.driver_errors import postgres_errors, typed_methods


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


@typed_methods(postgres_errors)
@dataclass(frozen=True)
class BatchStore:
    """The rows of `pdfqueue_batches`; counters of unfinished batches come from their files."""

    pool: asyncpg.Pool

    async def create(
        self,
        batch_id: str,
        tenant: str,
        source_key: str,
        *,
        pdfbatch_uid: str | None = None,
        file_name: str | None = None,
        queue_name: str,
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

    async def newest(
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

    async def active_count(self, tenant: str, uploading: Sequence[str] = ()) -> int:
        """Batches of `tenant` not yet terminal, plus those of `uploading` (uploads and
        retries in flight) that are not among them yet.

        Derived from the durable rows (an index keeps it cheap), so a crash never leaks a
        count, and an upload that just became a batch is counted once, whichever it is.
        """
        count: int = await self.pool.fetchval(_ACTIVE_BATCHES, tenant, list(uploading))
        return count

    async def processing(self, limit: int = 10_000) -> list[str]:
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
        PROCESSING) unless not `running`, only those of `queue_name` when given, only
        `batch_ids` when given. For
        operators (`pdfqueue admin`, the reconciler)."""
        where: list[str] = []
        args: list[Any] = []
        if batch_ids is not None:
            args.append(list(batch_ids))
            where.append(f"id = ANY(${len(args)}::text[])")
        if queue_name is not None:
            args.append(queue_name)
            where.append(f"queue_name = ${len(args)}")
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

    async def delete(self, batch_id: str) -> None:
        await self.pool.execute("DELETE FROM pdfqueue_batches WHERE id = $1", batch_id)

    async def get(self, batch_id: str) -> BatchRow | None:
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

    async def start(self, batch_id: str, total_files: int, ignored: int) -> None:
        await self.pool.execute(
            "UPDATE pdfqueue_batches SET total_files = $2, ignored = $3,"
            " status = CASE WHEN status = 'PENDING' THEN 'PROCESSING' ELSE status END"
            " WHERE id = $1",
            batch_id,
            total_files,
            ignored,
        )

    async def finish(
        self,
        batch_id: str,
        status: BatchStatus,
        error: str | None = None,
        reason: str | None = None,
    ) -> BatchSummary:
        """Write the final summary, counted from the per-file rows (idempotent)."""
        counts = await self.outcome_counts(batch_id)
        row = await self.pool.fetchrow(
            "UPDATE pdfqueue_batches SET status = $2, error = COALESCE($3, error),"
            " reason = COALESCE($4, reason),"
            " completed_at = COALESCE(completed_at, now()), processed = $5, "
            + ", ".join(f"{c} = ${i}" for i, c in enumerate(COUNTERS, start=6))
            + " WHERE id = $1 RETURNING *",
            batch_id,
            status.value,
            error,
            reason,
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


def _summary(row: Any) -> BatchSummary:
    return BatchSummary(
        batch_id=row["id"],
        status=BatchStatus(row["status"]),
        total_files=row["total_files"],
        processed=row["processed"],
        ignored=row["ignored"],
        error=row["error"],
        reason=row.get("reason"),
        created_at=row["created_at"],
        completed_at=row["completed_at"],
        file_name=row.get("file_name"),
        retries=row.get("retries") or 0,
        **{c: row[c] for c in COUNTERS},
    )
