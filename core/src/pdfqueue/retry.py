"""Retrying a completed batch's failed files: which files, and starting a round once.

A round moves each chosen file from `failed` back to undecided, in PostgreSQL (outcome
`retrying`, one more try, the old reason kept) and in Redis (outcome gone, counters given
back, batch PROCESSING), then queues one `retry` job that fans the files out as `process`
jobs with ids of their own. The worker's first write for a file replaces `retrying`; the
Redis script counts it then, once, as for any file.

PostgreSQL decides first, under the batch row's lock, so racing calls start one round. The
Redis step is guarded by the round number, so a call that repeats it (a caller that died
between the two steps, a racing call) changes nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import asyncpg
from redis.asyncio import Redis

from pdfqueue import keys
from pdfqueue.batches import settle
from pdfqueue.db import Database
from pdfqueue.errors import BatchNotFound, BatchNotRetryable
from pdfqueue.models import TERMINAL, BatchStatus
from pdfqueue.queue import Job, enqueue
from pdfqueue.state import BatchState

_RETRY = resources.files("pdfqueue").joinpath("lua/retry_batch.lua").read_text()

TRANSIENT_REASONS = frozenset({"timeout", "network_error", "internal_error", "worker_lost"})
"""Per-file reasons a retry may cure (besides any `<service>_unavailable`, see
pdfqueue.errors.transient_reason); the others (an unreadable PDF, no text) need
`all_failed`."""


def is_transient(reason: str | None) -> bool:
    return reason is not None and (reason in TRANSIENT_REASONS or _unavailable(reason))


def _unavailable(reason: str) -> bool:
    service, _, rest = reason.partition("_")
    return rest == "unavailable" and service.isalpha()


@dataclass(frozen=True)
class Round:
    """A retry round of one batch: its number, and where its ZIP is."""

    batch_id: str
    number: int
    source_key: str
    started: bool
    """This call started it; False when it resumed one a previous call left half done."""


async def start_retry(
    db: Database,
    state: BatchState,
    redis: Redis,
    queue_name: str,
    batch_id: str,
    *,
    all_failed: bool,
) -> Round:
    """Start a retry round of the batch's failed files (transient ones unless `all_failed`).

    Raises BatchNotRetryable when the batch is not COMPLETED or has no such file, and when
    its last round is still running. Safe to call again: a round whose Redis step or job is
    missing (its caller died) is completed, not started twice.
    """
    round_ = await _begin(db, batch_id, all_failed=all_failed)
    outcome = await _reset_live(db, state, round_)
    if not round_.started and outcome == "running" and await state.status(batch_id) in TERMINAL:
        # The last round completed in Redis; whoever completed it died before PostgreSQL.
        await settle(db, state, batch_id)
        round_ = await _begin(db, batch_id, all_failed=all_failed)
        outcome = await _reset_live(db, state, round_)
    job = Job(
        keys.retry_job(batch_id, round_.number),
        "retry",
        {"batch_id": batch_id, "source": round_.source_key, "retry_round": round_.number},
    )
    await _track_again(redis, queue_name, batch_id)
    # Queued even when the round runs already: the call that started it may have died
    # before this line, and the id makes a second enqueue a no-op.
    await enqueue(redis, queue_name, [job])
    if not round_.started and outcome == "running":
        raise BatchNotRetryable(batch_id, "its retry is still running")
    return round_


async def _track_again(redis: Redis, queue_name: str, batch_id: str) -> None:
    """The PdfBatch mirroring the batch, if any, follows its new round (the operator stopped
    mirroring it when it ended, and left its reference for this)."""
    ref = await redis.get(keys.operator_finished(queue_name, batch_id))
    if ref is not None:
        await redis.hset(keys.operator_batches(queue_name), batch_id, ref)  # type: ignore[misc]


async def _begin(db: Database, batch_id: str, *, all_failed: bool) -> Round:
    """The durable step, in one transaction under the batch row's lock."""
    async with db.pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "SELECT status, retries, source_key FROM pdfqueue_batches WHERE id = $1 FOR UPDATE",
            batch_id,
        )
        if row is None:
            raise BatchNotFound(batch_id)
        status = BatchStatus(row["status"])
        if status is BatchStatus.PROCESSING and row["retries"] > 0:
            return Round(batch_id, row["retries"], row["source_key"], started=False)
        if status is not BatchStatus.COMPLETED:
            raise BatchNotRetryable(batch_id, f"it is {status.value}, not COMPLETED")
        if not await _mark_files(conn, batch_id, all_failed=all_failed):
            which = "failed" if all_failed else "transiently failed"
            raise BatchNotRetryable(batch_id, f"it has no {which} file")
        number: int = await conn.fetchval(
            "UPDATE pdfqueue_batches SET status = 'PROCESSING', retries = retries + 1,"
            " completed_at = NULL, error = NULL WHERE id = $1 RETURNING retries",
            batch_id,
        )
        return Round(batch_id, number, row["source_key"], started=True)


async def _mark_files(conn: asyncpg.Connection, batch_id: str, *, all_failed: bool) -> int:
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
            " sha256 = NULL, recorded_at = now()"
            " WHERE batch_id = $1 AND idx = ANY($2::int[])",
            batch_id,
            chosen,
        )
    return len(chosen)


async def _reset_live(db: Database, state: BatchState, round_: Round) -> str:
    """The Redis step: 'started', 'running' (done already), or after a rebuild 'restored'."""
    files = await retrying_files(db, round_.batch_id)
    outcome = await state.redis.eval(  # type: ignore[misc]
        _RETRY,
        2,
        keys.batch(round_.batch_id),
        keys.outcomes(round_.batch_id),
        str(state.ttl_s),
        str(round_.number),
        *(str(i) for i in files),
    )
    text = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
    if text == "missing":  # live state expired: the durable record already has the round
        await _restore(db, state, round_.batch_id)
        return "restored"
    if text not in {"started", "running"}:
        raise BatchNotRetryable(round_.batch_id, f"its live state is {text}")
    return text


async def _restore(db: Database, state: BatchState, batch_id: str) -> None:
    found = await db.batch(batch_id)
    if found is not None:
        summary, tenant, _ = found
        await state.restore(summary, tenant, await db.outcomes(batch_id))


async def retrying_files(db: Database, batch_id: str) -> dict[int, str]:
    """The files a retry round still has to decide: index -> name."""
    rows = await db.pool.fetch(
        "SELECT idx, name FROM pdfqueue_files WHERE batch_id = $1 AND outcome = 'retrying'",
        batch_id,
    )
    return {r["idx"]: r["name"] for r in rows}
