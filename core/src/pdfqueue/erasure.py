"""Retention and erasure: what pdfqueue forgets, when, and the audit record of each removal.

Three removals, each safe to interrupt anywhere and finished by running it again:

- **purge** (retention): a batch that ended longer ago than its tenant's retention loses its
  per-file rows, its batch row, its webhook records, its ZIP and (under the operator's source
  prefix) its PdfBatch source. The PDFs it linked and the links stay: they belong to the host
  application now.
- **erase a batch** (its tenant): everything the batch made goes, the PDFs it stored and the
  links still pointing at them included.
- **erase a person** (an administrator): every stored PDF linked to the address's users, the
  user's link if it points at one, and the person's file rows redacted (counts kept).

Order makes a rerun finish what a crash left: links are set back to NULL before the objects
they point at are deleted, objects before the rows that name them, rows before the batch row,
and the batch row goes in the transaction that writes the audit record. A batch being erased is
hidden from every reader from the first step on. Nothing personal reaches the audit record or
the logs: a batch id, or a keyed hash of an address.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pdfqueue.domain import keys
from pdfqueue.domain.errors import BatchNotFound, InvalidDuration, ObjectNotFound
from pdfqueue.domain.models import TERMINAL, BatchStatus, UserId
from pdfqueue.domain.settings import Settings
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.observability import metrics
from pdfqueue.stores.postgres.retention import AuditRecord, EndedBatch, RetentionStore, StoredPdf
from pdfqueue.stores.storage import Storage

log = logging.getLogger(__name__)
CHUNK_ROWS = 2000
"""Rows one statement deletes or changes: a few milliseconds of locks, never a long one."""
ADMIN = "admin"
RETENTION = "retention"
_DURATION = re.compile(r"(\d{1,9})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in `30d`, `12h`, `15m` or `0s`; InvalidDuration for anything else."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise InvalidDuration(text)
    return int(match[1]) * _UNIT_S[match[2]]


@dataclass
class Removed:
    """What one removal took away (a dry run: what it would)."""

    batches: int = 0
    files: int = 0
    objects: int = 0
    bytes: int = 0
    links: int = 0

    def add(self, other: Removed) -> None:
        for name in ("batches", "files", "objects", "bytes", "links"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class PurgeReport:
    removed: Removed = field(default_factory=Removed)
    erasures_finished: int = 0
    audit_records_removed: int = 0
    dry_run: bool = False


@dataclass(frozen=True)
class BatchErasure:
    """An erasure of a batch: done, or still waiting for the batch's last jobs to end."""

    batch_id: str
    done: bool
    removed: Removed
    retry_after_s: int = 0


@dataclass(frozen=True)
class Eraser:
    """Purging and erasure over the durable record, the object store and the lifecycle."""

    retention: RetentionStore
    lifecycle: Lifecycle
    storage: Storage
    settings: Settings

    @property
    def settle_s(self) -> float:
        """How long after a batch ended none of its jobs can still be running: arq's limit
        per job, and the 10 s after it that arq waits before it gives a job to another worker."""
        return self.settings.arq_timeout_s + 10

    # --- a batch ----------------------------------------------------------------------------
    async def erase_batch(self, batch_id: str, *, tenant: str | None) -> BatchErasure:
        """Erase `tenant`'s batch (any tenant's for an administrator, `tenant=None`).

        The batch is hidden at once. A batch still running is cancelled first, and its
        removal waits until none of its jobs can be running: until then the answer is not
        done, with the seconds to wait; asking again (or the next purge) finishes it.
        BatchNotFound for an unknown batch, another tenant's, or one erased already.
        """
        batch = await self.retention.mark_erasing(batch_id, tenant)
        if batch is None:
            raise BatchNotFound(batch_id)
        await self.lifecycle.bury(batch_id)  # before the cancel: no job of it starts again
        if BatchStatus(batch.status) not in TERMINAL:
            await self.lifecycle.cancel(batch_id)
        await self.lifecycle.forget(batch_id)
        if not await self.retention.settled_for(batch_id, self.settle_s):
            return BatchErasure(batch_id, False, Removed(), retry_after_s=int(self.settle_s))
        removed = await self._remove(batch, actor=tenant or ADMIN, action="erase_batch")
        return BatchErasure(batch_id, True, removed)

    async def _remove(self, batch: EndedBatch, *, actor: str, action: str) -> Removed:
        """Remove the batch; its stored PDFs and their links too when it is an erasure."""
        removed = Removed(batches=1)
        await self.lifecycle.forget(batch.batch_id)
        if action == "erase_batch" or batch.erasing:  # a purge never keeps what was to go
            after = -1
            while page := await self.retention.stored_pdfs(
                batch.batch_id, after=after, limit=CHUNK_ROWS
            ):
                removed.add(await self._unlink_and_delete(page))
                after = page[-1].index
        for key in self._sources(batch):
            removed.add(await self._delete_objects([key]))
        await self._forget_jobs(batch.batch_id)
        while n := await self.retention.delete_files(batch.batch_id, limit=CHUNK_ROWS):
            removed.files += n
        record = _record(actor, action, batch.batch_id, removed)
        if await self.retention.delete_batch(batch.batch_id, record):
            metrics.data_removed(action, removed.files, removed.objects, removed.bytes)
            log.info(
                "%s: batch removed, %d file rows, %d objects, %d bytes",
                action,
                removed.files,
                removed.objects,
                removed.bytes,
                extra={"batch_id": batch.batch_id, "tenant": batch.tenant},
            )
        return removed

    async def _forget_jobs(self, batch_id: str) -> None:
        """Drop the Redis keys of every job the batch ran (arq keeps their arguments, file
        names included, for `keep_result`), found from its file rows before they go."""
        rounds = await self.retention.retry_rounds(batch_id)
        after = -1
        while page := await self.retention.file_indexes(batch_id, after=after, limit=CHUNK_ROWS):
            await self.lifecycle.forget_jobs(batch_id, page, rounds)
            after = page[-1]
        await self.lifecycle.forget_batch_jobs(batch_id, rounds)

    def _sources(self, batch: EndedBatch) -> list[str]:
        """The batch's ZIP: its upload, or a PdfBatch's source under the operator's prefix
        (a source elsewhere is the user's own object, and stays)."""
        upload = keys.upload(batch.batch_id)
        if batch.source_key == upload:
            return [upload]
        if batch.source_key.startswith(self.settings.operator_source_prefix):
            return [batch.source_key]
        return []

    async def _unlink_and_delete(self, pdfs: list[StoredPdf]) -> Removed:
        """Links first, then the objects no other batch links: never a dangling link."""
        exclusive, unlinked = await self.retention.unlink(pdfs)
        removed = await self._delete_objects(exclusive)
        removed.links = unlinked
        return removed

    async def _delete_objects(self, object_keys: list[str]) -> Removed:
        # Every deletion ends before the first error is raised: one left running would
        # outlive the stores' close (and open a new connection pool as the process exits).
        sizes = await asyncio.gather(
            *(self._delete(k) for k in object_keys), return_exceptions=True
        )
        for failed in sizes:
            if isinstance(failed, BaseException):
                raise failed
        found = [s for s in sizes if isinstance(s, int)]
        return Removed(objects=len(found), bytes=sum(found))

    async def _delete(self, key: str) -> int | None:
        """Delete one object; its size, or None when it was gone already."""
        try:
            size = await self.storage.size(key)
        except ObjectNotFound:
            return None
        await self.storage.delete(key)
        return size

    # --- retention --------------------------------------------------------------------------
    async def purge(
        self,
        *,
        older_than_s: float | None = None,
        tenant: str | None = None,
        dry_run: bool = False,
    ) -> PurgeReport:
        """Purge every ended batch past its tenant's retention (or older than `older_than_s`,
        of `tenant` only when given), finish erasures left waiting, and drop audit records
        past theirs. Never a batch that is still running, whatever its age."""
        report = PurgeReport(dry_run=dry_run)
        for group_tenant, excluding, age_s in self._groups(older_than_s, tenant):
            while batches := await self.retention.ended_before(
                older_than_s=max(age_s, self.settle_s), tenant=group_tenant, excluding=excluding
            ):
                for batch in batches:
                    if dry_run:
                        report.removed.add(await self._would_remove(batch))
                    else:
                        removed = await self._remove(batch, actor=RETENTION, action="purge")
                        report.removed.add(removed)
                if dry_run:
                    break  # a dry run removes nothing, so the next page would be this one
        if not dry_run:
            for batch in await self.retention.erasing():
                if tenant is None or batch.tenant == tenant:
                    done = await self.erase_batch(batch.batch_id, tenant=batch.tenant)
                    report.erasures_finished += done.done
            audit_s = self.settings.audit_retention_days * 86400
            if audit_s:
                while n := await self.retention.purge_audit(audit_s):
                    report.audit_records_removed += n
        return report

    def _groups(
        self, older_than_s: float | None, tenant: str | None
    ) -> list[tuple[str | None, tuple[str, ...], float]]:
        """(tenant, tenants excluded, age) of each retention that applies: an override
        tenant by itself, everybody else under the default. 0 days keeps for ever."""
        if older_than_s is not None:
            return [(tenant, (), older_than_s)]
        overrides = self.settings.tenant_retention_days
        groups: list[tuple[str | None, tuple[str, ...], float]] = [
            (t, (), d * 86400) for t, d in overrides.items() if d and tenant in (None, t)
        ]
        if self.settings.retention_days and (tenant is None or tenant not in overrides):
            groups.append((tenant, tuple(overrides), self.settings.retention_days * 86400))
        return groups

    async def _would_remove(self, batch: EndedBatch) -> Removed:
        sizes = []
        for key in self._sources(batch):
            with contextlib.suppress(ObjectNotFound):
                sizes.append(await self.storage.size(key))
        files = await self.retention.count_files(batch.batch_id)
        return Removed(batches=1, files=files, objects=len(sizes), bytes=sum(sizes))

    # --- a person ---------------------------------------------------------------------------
    async def erase_person(self, email: str, *, dry_run: bool = False) -> Removed:
        """Erase what pdfqueue holds of the person with this address, in every tenant."""
        removed = Removed()
        for user_id, linked_key in await self.retention.users_with_email(email):
            removed.add(await self._erase_user(user_id, linked_key, dry_run=dry_run))
        if not dry_run:
            subject = await self.address_hash(email)
            await self.retention.audit(_record(ADMIN, "erase_person", subject, removed))
            metrics.data_removed("erase_person", removed.files, removed.objects, removed.bytes)
            log.info(
                "erase_person: %d file rows redacted, %d objects, %d links",
                removed.files,
                removed.objects,
                removed.links,
                extra={"subject": subject},
            )
        return removed

    async def _erase_user(
        self, user_id: UserId, linked_key: str | None, *, dry_run: bool
    ) -> Removed:
        removed = Removed()
        own_prefix = keys.linked_prefix(user_id)
        seen: set[str] = set()
        after: tuple[str, int] = ("", -1)
        while page := await self.retention.files_of_user(user_id, after=after, limit=CHUNK_ROWS):
            stored = [p for p in page if isinstance(p, StoredPdf)]
            rows = [(p.batch_id, p.index) if isinstance(p, StoredPdf) else p for p in page]
            object_keys = [p.object_key for p in stored]
            seen.update(object_keys)
            if dry_run:
                removed.add(Removed(files=len(rows), objects=len(object_keys)))
            else:
                removed.links += await self.retention.unlink_user(user_id, object_keys)
                removed.add(await self._delete_objects(object_keys))
                removed.files += await self.retention.redact(user_id, rows)
            after = rows[-1]
        # A link whose rows retention purged already: the PDF is still pdfqueue's.
        if linked_key is not None and linked_key.startswith(own_prefix) and linked_key not in seen:
            if dry_run:
                removed.objects += 1
            elif await self.retention.unlink_user(user_id, [linked_key]):
                removed.links += 1
                removed.add(await self._delete_objects([linked_key]))
        return removed

    async def address_hash(self, email: str) -> str:
        """The audit trail's name of an address: a keyed hash, never the address."""
        key = await self.retention.hash_key()
        digest = hmac.new(key, email.strip().lower().encode(), hashlib.sha256).hexdigest()
        return f"email:{digest[:32]}"


def _record(actor: str, action: str, subject: str, removed: Removed) -> AuditRecord:
    return AuditRecord(
        at=datetime.now(UTC),
        actor=actor,
        action=action,
        subject=subject,
        files=removed.files,
        objects=removed.objects,
        bytes=removed.bytes,
    )
