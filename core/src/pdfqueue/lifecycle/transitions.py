"""The transitions of a batch (the state diagram is the package's docstring): each writes
PostgreSQL and Redis in the order `pdfqueue.lifecycle` states."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.advice import NO_PDF_MEMBERS, no_pdfs_found
from pdfqueue.domain.errors import BatchConflict, BatchNotRetryable
from pdfqueue.domain.models import (
    TERMINAL,
    BatchStatus,
    BatchSummary,
    Decision,
    FileRef,
    RetryRound,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.lifecycle.reads import BatchReads
from pdfqueue.observability import metrics
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.redis.fair_dispatch import drop_pending
from pdfqueue.stores.redis.queue import (
    JOB_EXPIRES_MS,
    Job,
    enqueue,
    forget_jobs,
    queued_with_prefix,
    remove,
)
from pdfqueue.stores.redis.state import BatchState, Recorded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lifecycle:
    """Batch transitions over one PostgreSQL, one Redis and one queue."""

    batches: BatchStore
    files: FileStore
    state: BatchState
    redis: Redis
    queue_name: str
    on_ended: Callable[[str], Awaitable[None]] | None = None
    """Run with the batch id on every completion and failure written here, a repeated one
    included."""

    @classmethod
    def of(
        cls, batches: BatchStore, files: FileStore, redis: Redis, settings: Settings
    ) -> Lifecycle:
        state = BatchState(redis, settings.batch_ttl_s)
        return cls(batches, files, state, redis, settings.queue_name)

    @property
    def reads(self) -> BatchReads:
        """What the batch looks like now (reads only)."""
        return BatchReads(self.batches, self.state)

    async def ping(self) -> None:
        """Raise RedisUnavailable unless Redis answers."""
        await self.state.ping()

    async def register(
        self,
        *,
        batch_id: str,
        tenant: str,
        source_key: str,
        pdfbatch_uid: str | None = None,
        file_name: str | None = None,
    ) -> BatchSummary:
        """Create the durable row and the live state and enqueue `ingest`, each only once.

        Safe to call again for the same batch (an operator re-reconciling, a retried request):
        an existing row is kept, live state is not reset, and the ingest job id is
        deterministic. An existing row with another tenant, source or PdfBatch raises
        BatchConflict: live state only ever carries the tenant PostgreSQL holds.
        """
        row = await self.batches.create(
            batch_id,
            tenant,
            source_key,
            pdfbatch_uid=pdfbatch_uid,
            file_name=file_name,
            queue_name=self.queue_name,
        )
        if (row.tenant, row.source_key, row.pdfbatch_uid) != (tenant, source_key, pdfbatch_uid):
            raise BatchConflict(batch_id)
        summary = row.summary
        if summary.status in TERMINAL:
            return summary
        created = await self.state.create(
            batch_id, row.tenant, summary.created_at, summary.file_name
        )
        job = Job(keys.ingest_job(batch_id), "ingest", {"batch_id": batch_id, "source": source_key})
        await enqueue(self.redis, self.queue_name, [job])
        if created:
            metrics.batch_entered(BatchStatus.PENDING)
        return summary

    async def unregister(self, batch_id: str, timeout_s: float) -> None:
        """Undo `register` of an upload that failed: best effort, each step within
        `timeout_s`, as the store that failed may still be down."""
        for step in (
            self.batches.delete(batch_id),
            self.state.delete(batch_id),
            remove(self.redis, self.queue_name, [keys.ingest_job(batch_id)]),
        ):
            try:
                await asyncio.wait_for(step, timeout_s)
            except Exception as exc:
                log.warning("clean-up step failed: %r", exc, extra={"batch_id": batch_id})

    async def start(
        self, batch_id: str, total_files: int, ignored: Sequence[tuple[int, str, str]]
    ) -> BatchStatus | None:
        """Ingest listed the archive: `total_files` to process, `ignored` members (index,
        name, reason) only reported. PENDING becomes PROCESSING; or FAILED at once when
        the archive holds no PDF at all (`no_pdf_members`: an input that yields nothing is
        no success); or COMPLETED at once when nothing is left to process."""
        await self.files.record_ignored(batch_id, ignored)
        await self.batches.start(batch_id, total_files, len(ignored))
        if total_files == 0:
            error = no_pdfs_found(name for _, name, _ in ignored)
            counts = {"total_files": 0, "ignored": len(ignored)}
            await self.fail(batch_id, error, reason=NO_PDF_MEMBERS, counts=counts)
            return BatchStatus.FAILED
        status = await self.state.start(batch_id, total_files, len(ignored))
        if status is None:
            await self.restore(batch_id)
            status = await self.state.start(batch_id, total_files, len(ignored))
        if status is BatchStatus.COMPLETED:  # nothing to process: an empty archive
            await self.completed(batch_id, first=True)
        else:
            metrics.batch_entered(BatchStatus.PROCESSING)
        return status

    async def record(self, batch_id: str, decided: Mapping[FileRef, Decision]) -> list[Decision]:
        """Record each file's outcome exactly once; returns, in order, what counts for each
        (an earlier try's outcome and reason win over this try's).

        PostgreSQL is written first: a crash between the two writes leaves rows that the
        retry finds, so the retry reports the same outcomes and the Redis script counts each
        once. The file that completes the batch completes its durable row too.
        """
        stored = await self.files.record(
            batch_id, {ref: d for ref, d in decided.items() if not d.stored}
        )
        # what counts is what PostgreSQL holds: an earlier try's row wins over this try's
        final = [stored.get(ref.index, d) for ref, d in decided.items()]
        pairs = [(ref.index, d.outcome) for ref, d in zip(decided, final, strict=True)]
        done = await self.state.record(batch_id, pairs)
        if Recorded.MISSING in done.codes:
            await self.restore(batch_id)
            done = await self.state.record(batch_id, pairs)
        for d, code in zip(final, done.codes, strict=True):
            if code in (Recorded.COUNTED, Recorded.COMPLETED_BATCH):
                metrics.document_counted(d.outcome, d.reason)
        if done.status == BatchStatus.COMPLETED.value:
            await self.completed(batch_id, first=Recorded.COMPLETED_BATCH in done.codes)
        return final

    async def completed(self, batch_id: str, *, first: bool) -> None:
        """Redis says COMPLETED: the durable row follows, then the hook. `first` is the one
        write that completed it (a redelivery repeats the rest, not the metric)."""
        await self.batches.finish(batch_id, BatchStatus.COMPLETED)
        if first:
            metrics.batch_entered(BatchStatus.COMPLETED)
            log.info("batch completed", extra={"batch_id": batch_id})
        if self.on_ended is not None:
            await self.on_ended(batch_id)

    async def requeue(self, batch_id: str, *, all_failed: bool) -> RetryRound:
        """Start a retry round of the batch's failed files (transient ones unless
        `all_failed`): COMPLETED becomes PROCESSING, each chosen file undecided again.

        PostgreSQL decides first, under the batch row's lock, so racing calls start one
        round; the Redis step is guarded by the round number, so repeating it changes
        nothing twice. Raises BatchNotRetryable when the batch is not COMPLETED, has no such
        file, or its last round still runs. Safe to call again: a round whose Redis step or
        job is missing (its caller died) is completed, not started twice.
        """
        round_ = await self.files.begin_retry(batch_id, all_failed=all_failed)
        outcome = await self._reset_live(round_)
        if (
            not round_.started
            and outcome == "running"
            and await self.state.status(batch_id) in TERMINAL
        ):
            # The last round completed in Redis; whoever completed it died before PostgreSQL.
            await self.settle(batch_id)
            round_ = await self.files.begin_retry(batch_id, all_failed=all_failed)
            outcome = await self._reset_live(round_)
        job = Job(
            keys.retry_job(batch_id, round_.number),
            "retry",
            {"batch_id": batch_id, "source": round_.source_key, "retry_round": round_.number},
        )
        await self._track_again(batch_id)
        # Queued even when the round runs already: the call that started it may have died
        # before this line, and the id makes a second enqueue a no-op.
        await enqueue(self.redis, self.queue_name, [job])
        if not round_.started and outcome == "running":
            raise BatchNotRetryable(batch_id, "its retry is still running")
        return round_

    async def _reset_live(self, round_: RetryRound) -> str:
        """The round's Redis step: 'started', 'running' (done already) or 'restored'."""
        files = await self.files.retrying(round_.batch_id)
        outcome = await self.state.reset_for_retry(round_.batch_id, round_.number, list(files))
        if outcome == "missing":  # live state expired: the durable record has the round
            await self.restore(round_.batch_id)
            return "restored"
        if outcome not in {"started", "running"}:
            raise BatchNotRetryable(round_.batch_id, f"its live state is {outcome}")
        return outcome

    async def _track_again(self, batch_id: str) -> None:
        """The PdfBatch mirroring the batch, if any, follows its new round (the operator
        stopped mirroring it when it ended, and left its reference for this)."""
        ref = await self.redis.get(keys.operator_finished(self.queue_name, batch_id))
        if ref is not None:
            await self.redis.hset(keys.operator_batches(self.queue_name), batch_id, ref)  # type: ignore[misc]

    async def stop_tracking(self, batch_id: str) -> bool:
        """The operator showed the batch's end: drop it from its tracking hash, unless a
        retry round runs already (False). One Redis step, so whatever the order against
        `requeue` and whether the caller gets to do anything more, a round either finds the
        batch still tracked or tracks it again from the reference the operator left first."""
        return await self.state.untrack_ended(batch_id, keys.operator_batches(self.queue_name))

    async def fail(
        self,
        batch_id: str,
        error: str,
        *,
        reason: str,
        counts: Mapping[str, int] | None = None,
    ) -> None:
        """The batch cannot run (its archive is refused or holds no PDF, ingest ran out of
        tries): FAILED with `error` (words, never a member name) and `reason` (a bounded
        code, see `pdfqueue.domain.advice.BATCH_ADVICE`); `counts` go into the live state in
        the same step. Then the `on_ended` hook (the webhook), as for a completion."""
        await self.state.set_status(
            batch_id, BatchStatus.FAILED, error, reason=reason, counts=counts
        )
        await self.batches.finish(batch_id, BatchStatus.FAILED, error, reason)
        metrics.batch_entered(BatchStatus.FAILED)
        log.warning("batch failed: %s", reason, extra={"batch_id": batch_id})
        if self.on_ended is not None:
            await self.on_ended(batch_id)

    async def cancel(self, batch_id: str) -> int:
        """Mark the batch CANCELLED and drop its pending and queued jobs; returns how many
        were dropped.

        Running jobs finish and are counted (`process` checks the status before it starts).
        The caller decides whether the batch may still be cancelled, i.e. is not terminal.
        """
        await self.state.set_status(batch_id, BatchStatus.CANCELLED)
        await self.batches.finish(batch_id, BatchStatus.CANCELLED)
        metrics.batch_entered(BatchStatus.CANCELLED)
        dropped = await drop_pending(self.redis, self.queue_name, batch_id)
        pending = [keys.ingest_job(batch_id)]
        pending += await queued_with_prefix(
            self.redis, self.queue_name, keys.process_job_prefix(batch_id)
        )
        return dropped + await remove(self.redis, self.queue_name, pending)

    async def forget(self, batch_id: str) -> None:
        """Drop the live state of a batch being erased: readers fall back to its durable row,
        which hides it, and a job still running finds nothing to restore it from."""
        await self.state.delete(batch_id)
        await self.redis.hdel(keys.operator_batches(self.queue_name), batch_id)  # type: ignore[misc]

    async def bury(self, batch_id: str) -> None:
        """The batch's erasure is accepted: from now on none of its jobs starts, and no work
        of it is registered (`buried`), for as long as a queued job can live."""
        await self.state.bury(batch_id, JOB_EXPIRES_MS)

    async def forget_jobs(self, batch_id: str, indexes: list[int], rounds: int) -> int:
        """Drop every Redis key of the batch's `process` jobs for the files at `indexes`:
        ids computed from the batch's own record, never searched for. Returns how many keys
        were there."""
        ids = keys.file_job_ids(batch_id, indexes, rounds)
        return await forget_jobs(self.redis, ids)

    async def forget_batch_jobs(self, batch_id: str, rounds: int) -> int:
        """Drop the keys of the batch's once-per-batch and per-round jobs, and its
        fair-dispatch keys on both queues. Returns how many keys were there."""
        removed = await forget_jobs(self.redis, keys.batch_job_ids(batch_id, rounds))
        fair = [
            *keys.fair_batch_keys(self.queue_name, batch_id),
            *keys.fair_batch_keys(keys.delivery_queue(self.queue_name), batch_id),
        ]
        removed += int(await self.redis.unlink(*fair))
        return removed

    async def settle(self, batch_id: str) -> None:
        """Write to PostgreSQL a terminal status that Redis holds; idempotent.

        Completion, fail and cancel write Redis first, then PostgreSQL: a process that dies in
        between leaves the durable row unfinished, and it would hold one of its tenant's
        concurrent-batch slots for good. Whatever runs next for the batch (a redelivered
        job, a repeated cancel) calls this.
        """
        live = await self.state.read(batch_id)
        if live is not None and live.summary.status in TERMINAL:
            summary = live.summary
            await self.batches.finish(batch_id, summary.status, summary.error, summary.reason)

    async def restore(self, batch_id: str, *, stale: bool = False) -> bool:
        """Rebuild missing live state from the durable rows (it outlived its TTL, or Redis
        lost it); returns whether it was written. Live state found there is left alone
        (another restore wrote it first), unless `stale`: the caller saw no work of the batch
        in Redis (so nobody records meanwhile) and live counts behind PostgreSQL's."""
        row = await self.batches.get(batch_id)
        if row is None:
            return False
        summary = row.summary
        outcomes = await self.files.outcomes(batch_id)
        if (
            summary.status is BatchStatus.PROCESSING
            and summary.total_files is not None
            and len(outcomes) >= summary.total_files
        ):
            summary = summary.model_copy(update={"status": BatchStatus.COMPLETED})
        if stale:
            await self.state.delete(batch_id)
        written = await self.state.restore(summary, row.tenant, outcomes)
        if written:
            log.warning("restored missing live state", extra={"batch_id": batch_id})
        return written
