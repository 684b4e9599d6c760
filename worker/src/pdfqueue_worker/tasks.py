"""The two arq tasks: `ingest` (a ZIP into per-PDF jobs) and `process` (one PDF)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from arq import Retry
from arq.constants import retry_key_prefix

from pdfqueue import keys, metrics
from pdfqueue.errors import PermanentError, transient_reason
from pdfqueue.models import TERMINAL, BatchStatus, FileRef, Outcome
from pdfqueue.observe import observed_job, stage
from pdfqueue.queue import Job, enqueue_chunked
from pdfqueue_worker.archive import Member, MemberRejected, list_members, read_member
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.extract import Unreadable
from pdfqueue_worker.record import Decision, failed, record, restore

log = logging.getLogger(__name__)
NO_MATCH = Outcome.SKIPPED_NO_MATCH
PDF_MAGIC_WINDOW = 1024  # the PDF spec lets junk precede %PDF- within the first KiB

Task = Callable[..., Awaitable[Any]]


def keeps_try_on_shutdown(task: Task) -> Task:
    """A job cancelled by a graceful shutdown runs again without spending one of its tries.

    arq counts a try when the job starts; on SIGTERM past `job_completion_wait` it cancels
    the job and leaves it queued. Giving the try back keeps deploys from failing PDFs.
    """

    @wraps(task)
    async def wrapper(ctx: dict[str, Any], **kwargs: Any) -> Any:
        try:
            return await task(ctx, **kwargs)
        except asyncio.CancelledError:
            deps: Deps = ctx["deps"]
            await asyncio.shield(deps.redis.decr(retry_key_prefix + ctx["job_id"]))
            raise

    return wrapper


LAST_ERROR_TTL_S = 7 * 24 * 3600


async def _retry_later(deps: Deps, ctx: dict[str, Any], exc: Exception) -> Retry:
    """Remember why this try failed (the final reason if tries run out), then defer a retry."""
    reason = transient_reason(exc)
    log.warning(
        "try %d failed (%s): %r", ctx["job_try"], reason, exc, extra={"job_id": ctx["job_id"]}
    )
    with contextlib.suppress(Exception):  # Redis may be the thing that is down
        await deps.redis.set(keys.last_error(ctx["job_id"]), reason, ex=LAST_ERROR_TTL_S)
    return Retry(defer=deps.backoff_s(ctx["job_try"]))


async def _last_error(deps: Deps, ctx: dict[str, Any]) -> str:
    raw = await deps.redis.get(keys.last_error(ctx["job_id"]))
    # No recorded error means every try died with its worker (OOM kill, node loss).
    return raw.decode() if isinstance(raw, bytes) else (raw or "worker_lost")


@observed_job("ingest", link=False)
@keeps_try_on_shutdown
async def ingest(ctx: dict[str, Any], *, batch_id: str, source: str) -> str:
    """List the ZIP, record what fails at once, and fan out one `process` job per PDF."""
    deps: Deps = ctx["deps"]
    try:
        async with asyncio.timeout(deps.settings.job_timeout_s):  # see `process`
            if ctx["job_try"] <= deps.settings.max_tries:
                return await _ingest(deps, batch_id, source)
            error = f"ingest gave up: {await _last_error(deps, ctx)}"
            await deps.state.set_status(batch_id, BatchStatus.FAILED, error)
            await deps.db.finish_batch(batch_id, BatchStatus.FAILED, error)
            metrics.batch_entered(BatchStatus.FAILED)
    except Exception as exc:
        raise await _retry_later(deps, ctx, exc) from exc
    return error


async def _ingest(deps: Deps, batch_id: str, source: str) -> str:
    if await deps.state.status(batch_id) in TERMINAL:
        return "already finished"
    try:
        listing = await deps.storage.run(list_members, deps.storage.backend, source, deps.limits)
    except PermanentError as exc:
        log.warning("archive rejected: %s", exc, extra={"batch_id": batch_id})
        await deps.state.set_status(batch_id, BatchStatus.FAILED, str(exc))
        await deps.db.finish_batch(batch_id, BatchStatus.FAILED, str(exc))
        metrics.batch_entered(BatchStatus.FAILED)
        return f"rejected: {exc}"

    await deps.db.record_ignored(batch_id, listing.ignored)
    await deps.db.start_batch(batch_id, listing.total_files, len(listing.ignored))
    status = await deps.state.start(batch_id, listing.total_files, len(listing.ignored))
    if status is None:
        await restore(deps, batch_id)
        status = await deps.state.start(batch_id, listing.total_files, len(listing.ignored))
    if status is BatchStatus.COMPLETED:  # nothing to process: an empty archive
        await deps.db.finish_batch(batch_id, BatchStatus.COMPLETED)
        metrics.batch_entered(BatchStatus.COMPLETED)
    else:
        metrics.batch_entered(BatchStatus.PROCESSING)
    for index, name, why in listing.rejected:
        await record(deps, FileRef(batch_id, index, name), failed(why.reason))
    jobs = (
        Job(
            keys.process_job(batch_id, m.index),
            "process",
            {"batch_id": batch_id, "source": source, "member": m.to_job()},
        )
        for m in listing.pdfs
    )
    added = await enqueue_chunked(
        deps.redis, deps.settings.queue_name, jobs, deps.settings.enqueue_chunk
    )
    log.info(
        "ingested %d PDFs (%d new jobs), %d rejected, %d ignored",
        len(listing.pdfs),
        added,
        len(listing.rejected),
        len(listing.ignored),
        extra={"batch_id": batch_id},
    )
    return f"{len(listing.pdfs)} PDFs"


@observed_job("process", link=True)
@keeps_try_on_shutdown
async def process(
    ctx: dict[str, Any], *, batch_id: str, source: str, member: dict[str, Any]
) -> str:
    """Read one PDF, find its user, store it, claim the user, record exactly one outcome.

    Tries 1..max_tries do the work; any error but bad input retries with backoff. Past
    max_tries (arq allows a few more) a try only records `failed` with the last error, so
    the batch always finishes even when a PDF keeps killing its worker.

    The job's own deadline (job_timeout_s) turns an overloaded or stuck try into a retry:
    arq's hard timeout, a few seconds later, would end the job with no outcome at all.
    """
    deps: Deps = ctx["deps"]
    m = Member(**member)
    try:
        async with asyncio.timeout(deps.settings.job_timeout_s):
            if await deps.state.status(batch_id) is BatchStatus.CANCELLED:
                return "cancelled"
            ref = FileRef(batch_id, m.index, m.name)
            if ctx["job_try"] <= deps.settings.max_tries:
                decision = await _process(deps, ref, source, m)
            else:
                decision = failed(await _last_error(deps, ctx))
            outcome = await record(deps, ref, decision)
    except Exception as exc:
        raise await _retry_later(deps, ctx, exc) from exc
    return outcome.value


async def _process(deps: Deps, ref: FileRef, source: str, m: Member) -> Decision:
    """Read, parse and match one PDF; the claim is the only write besides the recording."""
    try:
        with stage("read"):
            data = await deps.storage.run(read_member, deps.storage.backend, source, m)
        if b"%PDF-" not in data[:PDF_MAGIC_WINDOW]:
            return failed("not_a_pdf")
        with stage("extract") as span:
            found = await deps.extractor.extract(data)
            span.set_attribute("pdfqueue.pages", found.pages)
            span.set_attribute("pdfqueue.email_candidates", len(found.emails))  # a count only
    except (MemberRejected, Unreadable) as exc:
        return failed(exc.reason)
    if not found.emails:
        return failed("no_text") if not found.has_text else Decision(NO_MATCH, "no_email")

    with stage("match"):
        users = await deps.db.users_by_email(found.emails)
        user = next((users[e] for e in found.emails if e in users), None)
    if user is None:
        return Decision(NO_MATCH, "no_user")
    sha256 = hashlib.sha256(data).hexdigest()
    key = f"pdfs/{user.id}/{sha256}.pdf"
    if user.pdf_url is not None:
        reason = "duplicate" if user.pdf_url == key else "already_linked"
        return Decision(Outcome.SKIPPED_ALREADY_EXISTS, reason, user.id, sha256)

    with stage("store"):
        await deps.storage.put(key, data)
    with stage("claim"):
        outcome, reason = await deps.db.claim(ref, user_id=user.id, object_key=key, sha256=sha256)
        if reason == "already_linked":
            # Another link won the race; nobody else can claim this user now: the copy is ours.
            await deps.storage.delete(key)
    return Decision(outcome, reason, user.id, sha256, stored=True)
