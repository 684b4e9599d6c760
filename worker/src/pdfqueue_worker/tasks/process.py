"""The `process` task: read a run of a batch's PDFs, match, store and link them, record each."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import Counter
from dataclasses import replace
from typing import Any

from pdfqueue.domain import keys
from pdfqueue.domain.errors import DependencyRejected, StorageError
from pdfqueue.domain.models import (
    BatchStatus,
    Claim,
    Decision,
    FileRef,
    Outcome,
    failed,
)
from pdfqueue.observability import metrics
from pdfqueue.stores.postgres.users import UserRow
from pdfqueue_worker.archive import member_span
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.extractor import Deferred, Unreadable
from pdfqueue_worker.fair_dispatch import refills
from pdfqueue_worker.matching import choose, wanted
from pdfqueue_worker.observe import observed_job, stage
from pdfqueue_worker.parse import Extraction
from pdfqueue_worker.payload import Member, Packed, cut, inflate
from pdfqueue_worker.tasks.attempt import (
    ERASED,
    ScansWaiting,
    give_try_back,
    keeps_try_on_shutdown,
    last_try_error,
    record_outcomes,
    retry_later,
)

log = logging.getLogger(__name__)
NO_MATCH = Outcome.SKIPPED_NO_MATCH
NO_LINK = Outcome.SKIPPED_ALREADY_EXISTS
RECORD_RESERVE_S = 4.0
"""Of a job's deadline, what is kept for matching, storing, claiming and recording."""
LINK_INFLATED_BYTES = 16 * 1024**2
"""Most inflated bytes one job holds at once while storing its linked PDFs (more only for a
single member that big): the worker inflates a member only to store it, parsing processes
inflate what they read under their own memory cap."""

INLINE_INFLATE_BYTES = 256 * 1024
"""A linked PDF up to this size is inflated on the event loop (well under a millisecond)."""


@observed_job("process", link=True)
@keeps_try_on_shutdown
@refills
async def process(
    ctx: dict[str, Any], *, batch_id: str, source: str, members: list[dict[str, Any]]
) -> str:
    """Read a run of PDFs, find their users, store them, claim the users, record outcomes.

    Each file gets exactly one outcome; a retry only does the files still without one.
    Tries 1..max_tries do the work; any error but bad input retries with backoff. Past
    max_tries (arq allows a few more) a try only records `failed` with the last error, so
    the batch always finishes even when a PDF keeps killing its worker.

    The job's own deadline (job_timeout_s) turns an overloaded or stuck try into a retry:
    arq's hard timeout, a few seconds later, would end the job with no outcome at all.
    Parsing gets the deadline less RECORD_RESERVE_S: files parsed by then are finished and
    recorded, the rest wait for the next try. A try that recorded some files gives its try
    back: tries count failures, not a deadline that cut work short, so a job of scans that
    OCR needs several tries for still finishes (each such try records at least one file, so
    there are at most as many as the job has files). So does a try whose scans were
    `Deferred` because the worker's OCR turns were taken by other jobs' scans (those make
    progress meanwhile). Any other try that recorded nothing counts.
    """
    deps: Deps = ctx["deps"]
    try:
        async with asyncio.timeout(deps.settings.job_timeout_s):
            parse_until = asyncio.get_running_loop().time() + max(
                deps.settings.job_timeout_s - RECORD_RESERVE_S, deps.settings.job_timeout_s / 2
            )
            if await deps.lifecycle.reads.buried(batch_id):  # its erasure is accepted
                return ERASED
            if await deps.lifecycle.reads.status(batch_id) is BatchStatus.CANCELLED:
                await deps.lifecycle.settle(batch_id)  # the canceller may have died
                return "cancelled"
            todo = await _unrecorded(deps, batch_id, [Member(**m) for m in members])
            if not todo:  # a second delivery after every file was recorded
                await deps.lifecycle.settle(batch_id)  # the first may have died
                return "nothing to do"
            if ctx["job_try"] > deps.settings.max_tries:
                reason = await last_try_error(deps, ctx)
                await record_outcomes(
                    deps, batch_id, {_ref(batch_id, m): failed(reason) for m in todo}
                )
                return f"{len(todo)} failed: {reason}"
            together = ctx["job_try"] == 1
            deferred: set[FileRef] = set()
            try:
                decided = await _process(
                    deps, batch_id, source, todo, parse_until, together=together, deferred=deferred
                )
            except DependencyRejected:  # a store refused what one of the files carried
                decided = await _process_apart(
                    deps, batch_id, source, todo, parse_until, deferred=deferred
                )
            outcomes = await record_outcomes(deps, batch_id, decided)
            if len(decided) < len(todo):
                left = len(todo) - len(decided)
                if decided or deferred:  # progress, or held back by the worker's OCR queue
                    await give_try_back(ctx)
                if deferred and not decided:
                    wait_s = deps.extractor.ocr_wait_s()
                    raise ScansWaiting(f"{left} PDFs wait for an OCR turn", wait_s)
                raise TimeoutError(f"{left} PDFs were not parsed in time")
    except DependencyRejected as exc:  # even the safe path was refused: no try would pass
        log.error("process refused: %r", exc, extra={"batch_id": batch_id})
        return f"refused: {exc.reason}"
    except Exception as exc:
        raise await retry_later(deps, ctx, exc) from exc
    return ", ".join(f"{n} {o.value}" for o, n in Counter(outcomes).items())


async def _process_apart(
    deps: Deps,
    batch_id: str,
    source: str,
    members: list[Member],
    parse_until: float,
    *,
    deferred: set[FileRef],
) -> dict[FileRef, Decision]:
    """`_process` a file at a time, after a store refused what one of them carried: that
    one fails with the refusal's reason, its neighbours are decided as ever."""
    decided: dict[FileRef, Decision] = {}
    for m in members:
        try:
            decided.update(
                await _process(
                    deps, batch_id, source, [m], parse_until, together=False, deferred=deferred
                )
            )
        except DependencyRejected as exc:
            log.warning(
                "file %d refused (%s): recorded failed",
                m.index,
                exc.reason,
                extra={"batch_id": batch_id},
            )
            decided[_ref(batch_id, m)] = failed(exc.reason)
    return decided


def _ref(batch_id: str, m: Member) -> FileRef:
    return FileRef(batch_id, m.index, m.name)


async def _unrecorded(deps: Deps, batch_id: str, members: list[Member]) -> list[Member]:
    left = set(await deps.lifecycle.reads.unrecorded(batch_id, [m.index for m in members]))
    return [m for m in members if m.index in left]


async def _process(
    deps: Deps,
    batch_id: str,
    source: str,
    members: list[Member],
    parse_until: float,
    *,
    together: bool,
    deferred: set[FileRef],
) -> dict[FileRef, Decision]:
    """Decide an outcome for each file, in steps that each serve the whole run at once.

    Read: one ranged GET, still compressed. Extract: every PDF in the parsing pool, which
    inflates it under its memory cap, up to its first page with an address; `together`, in
    group tasks (the first try), else one task per PDF, so that a PDF that hangs its parser
    cannot make its neighbours miss the deadline try after try (scans left for a later try
    are added to `deferred`). Match: one query
    for all those addresses; a file whose addresses are nobody's reads on and matches again.
    Then each file that found a user is inflated, stored and claimed. The claim is the only
    write besides the recording. Files not parsed by `parse_until` are left out.
    """
    with stage("read"):
        pdfs = await _read(deps, batch_id, source, members)
    matched, decided, ocr = await _match(deps, pdfs, parse_until, together, deferred)
    decided = {ref: replace(d, ocr=ref in ocr) for ref, d in decided.items()}
    for wave in _waves(matched, {ref: m.size for ref, (m, _) in pdfs.items()}):
        decided.update(await _link(deps, {ref: (matched[ref], *pdfs[ref]) for ref in wave}, ocr))
    return decided


async def _read(
    deps: Deps, batch_id: str, source: str, members: list[Member]
) -> dict[FileRef, tuple[Member, bytes]]:
    """Each member's compressed bytes, from one ranged read (a long local header reads a
    little more)."""
    start, length = member_span(members)
    data = await deps.storage.read_range(source, start, length)
    out: dict[FileRef, tuple[Member, bytes]] = {}
    for m in members:
        raw, more = cut(data, start, m)
        if more and len(data) == length:  # a short read means the object ends there
            raw += await deps.storage.read_range(source, m.offset + len(raw), more)
        out[_ref(batch_id, m)] = (m, raw)
    return out


def _waves(matched: dict[FileRef, UserRow], sizes: dict[FileRef, int]) -> list[list[FileRef]]:
    """The linked files in groups of at most LINK_INFLATED_BYTES, stored one group at a time."""
    waves: list[list[FileRef]] = []
    held = 0
    for ref in matched:
        if not waves or held + sizes[ref] > LINK_INFLATED_BYTES:
            waves.append([])
            held = 0
        waves[-1].append(ref)
        held += sizes[ref]
    return waves


async def _match(
    deps: Deps,
    pdfs: dict[FileRef, tuple[Member, bytes]],
    parse_until: float,
    together: bool,
    deferred: set[FileRef],
) -> tuple[dict[FileRef, UserRow], dict[FileRef, Decision], set[FileRef]]:
    """Each PDF's user, chosen among its candidates (`matching.choose`); else why not.

    Parsing stops at the first page with a candidate. A file whose candidates so far match
    nobody reads on from there, and its new candidates are matched in the next round.
    Also returns the files read (in part) by OCR.
    """
    matched: dict[FileRef, UserRow] = {}
    unmatched: dict[FileRef, Decision] = {}
    ocr: set[FileRef] = set()
    page = dict.fromkeys(pdfs, 0)  # where each file's next read starts
    domains = deps.settings.placeholder_domains
    while page:
        with stage("extract") as span:
            extracted = await _extract_all(
                deps, pdfs, page, until=parse_until, together=together, deferred=deferred
            )
            # counts only, never an address
            parsed = [r for r in extracted.values() if isinstance(r, Extraction)]
            span.set_attribute("pdfqueue.pages", sum(r.pages for r in parsed))
            span.set_attribute("pdfqueue.email_candidates", sum(len(r.emails) for r in parsed))
            span.set_attribute("pdfqueue.ocr_pages", sum(r.ocr_pages for r in parsed))
        for ref, result in extracted.items():
            if isinstance(result, Extraction) and result.ocr_pages:
                metrics.ocr_pages(result.ocr_pages)
                ocr.add(ref)
        found: dict[FileRef, Extraction] = {}
        for ref, result in extracted.items():
            if isinstance(result, Extraction) and result.candidates:
                found[ref] = result
            else:
                unmatched[ref] = _no_address(result, read_on=page[ref] > 0)
        page = {}
        if not found:
            break
        with stage("match"):
            addresses = wanted((c for r in found.values() for c in r.candidates), domains)
            # every file of a job is of one batch, whose tenant scopes the users it may match
            users = await deps.users.by_email(addresses, batch_id=next(iter(found)).batch_id)
        for ref, extraction in found.items():
            verdict = choose(extraction.candidates, users, domains)
            if verdict.user is not None:
                matched[ref] = verdict.user
            elif verdict.ambiguous:
                unmatched[ref] = Decision(Outcome.SKIPPED_AMBIGUOUS, "ambiguous")
            elif extraction.next_page is not None:
                page[ref] = extraction.next_page
            else:
                unmatched[ref] = Decision(NO_MATCH, "no_user")
    return matched, unmatched, ocr


def _no_address(result: Extraction | Unreadable, *, read_on: bool) -> Decision:
    """The outcome of a file whose read found no address (`read_on`: past some that were
    nobody's)."""
    if isinstance(result, Unreadable):
        return failed(result.reason)
    if read_on:
        return Decision(NO_MATCH, "no_user")
    if result.needs_ocr:
        return Decision(NO_MATCH, "needs_ocr")
    return Decision(NO_MATCH, "no_email") if result.has_text else failed("no_text")


async def _extract_all(
    deps: Deps,
    pdfs: dict[FileRef, tuple[Member, bytes]],
    page: dict[FileRef, int],
    *,
    until: float,
    together: bool,
    deferred: set[FileRef],
) -> dict[FileRef, Extraction | Unreadable]:
    """Parse the PDFs in `page`, each from its page there, in the pool; those not done by
    `until` are left out, those `Deferred` go to `deferred`. `together`: in group tasks
    (`Extractor.extract_members`)."""
    refs = list(page)
    items = [(pdfs[ref][1], pdfs[ref][0], page[ref]) for ref in refs]
    out: dict[FileRef, Extraction | Unreadable] = {}
    left = len(deferred)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(until):
            reads = deps.extractor.extract_members(items, together=together, until=until)
            async with contextlib.aclosing(reads):
                async for i, result in reads:
                    if isinstance(result, Deferred):
                        deferred.add(refs[i])
                    else:
                        out[refs[i]] = result
    metrics.ocr_deferred(len(deferred) - left)
    return out


async def _link(
    deps: Deps, wave: dict[FileRef, tuple[UserRow, Member, bytes]], ocr: set[FileRef]
) -> dict[FileRef, Decision]:
    """Store each PDF under its content-addressed key, then claim the users for them at once.

    A user already linked when matched is not stored again. The copies of the files that
    lost their user to another link are deleted: nobody else can claim that user now.
    """
    decided: dict[FileRef, Decision] = {}
    claims: list[Claim] = []
    objects: dict[str, tuple[bytes, str]] = {}
    for ref, (user, member, raw) in wave.items():
        data = await _inflated(deps, member, raw)
        sha256 = hashlib.sha256(data).hexdigest()
        key = keys.linked_pdf(user.id, sha256)
        if user.link is not None:
            skip = "duplicate" if user.linked_key == key else "already_linked"
            decided[ref] = Decision(NO_LINK, skip, user.id, sha256, ocr=ref in ocr)
        else:
            claims.append(Claim(ref, user.id, key, sha256, ocr=ref in ocr))
            objects[key] = data, sha256
    if not claims:
        return decided
    with stage("store"):
        tenant = await _tenant(deps, claims[0].ref.batch_id)
        await asyncio.gather(
            *(
                deps.storage.put(key, data, sha256=h, tenant=tenant)
                for key, (data, h) in objects.items()
            )
        )
    with stage("claim"):
        decided.update(claimed := await deps.files.claim(claims))
    won = {c.object_key for c in claims if claimed[c.ref].outcome is Outcome.LINKED}
    lost = {c.object_key for c in claims if _lost(claimed[c.ref])} - won
    await asyncio.gather(*(deps.storage.delete(key) for key in lost))
    return decided


async def _tenant(deps: Deps, batch_id: str) -> str | None:
    """The batch's tenant, when its PDFs are encrypted with its own KMS key (else None: one
    key for all, no read). Never the installation's key for want of a tenant: a batch no
    store names (yet) is retried."""
    if not deps.storage.encrypts_by_tenant:
        return None
    tenant = await deps.lifecycle.reads.tenant(batch_id)
    if tenant is None:
        msg = f"batch {batch_id}'s tenant is not known: its KMS key cannot be chosen"
        raise StorageError(msg)
    return tenant


def _lost(d: Decision) -> bool:
    """The claim's copy is nobody's: another file linked the user, or the claim was refused."""
    return d.reason == "already_linked" or d.outcome is Outcome.FAILED


async def _inflated(deps: Deps, member: Member, raw: bytes) -> bytes:
    """A parsed member's bytes: a small one on the event loop (a thread hop costs more CPU
    than inflating a résumé), a big one off it."""
    if member.size <= INLINE_INFLATE_BYTES:
        return inflate(raw, Packed.of(member))
    return await deps.storage.run(inflate, raw, Packed.of(member))
