"""Batch operations behind the HTTP routes: create, read, cancel, erase, report."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

import asyncpg
from redis.asyncio import Redis
from starlette.requests import ClientDisconnect

from pdfqueue import webhooks
from pdfqueue.domain import keys
from pdfqueue.domain.errors import (
    BatchNotRetryable,
    DatabaseNearlyFull,
    InvalidCursor,
    InvalidData,
    PdfQueueError,
    RedisNearlyFull,
    ServiceUnavailable,
    StorageRefusingWrites,
    UnsafeCallback,
    UploadAborted,
)
from pdfqueue.domain.models import (
    TERMINAL,
    BatchPage,
    BatchSummary,
    FilePage,
    FileQuery,
    FileResult,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import BatchErasure, Eraser
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.observability import tracing
from pdfqueue.stores.postgres import callbacks
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.pool import connection_use, ping
from pdfqueue.stores.postgres.retention import RetentionStore
from pdfqueue.stores.redis.queue import memory_share
from pdfqueue.stores.redis.quotas import Admission, Quotas
from pdfqueue.stores.storage import Storage
from pdfqueue.stores.storage.zipdir import DirectoryLimits
from pdfqueue_api.pdfbatches import PdfBatchPublisher
from pdfqueue_api.read_slots import TenantSlots
from pdfqueue_api.upload import display_name, store_upload

log = logging.getLogger(__name__)
DEPENDENCY_TIMEOUT_S = 2.0
HIDDEN_FROM_TENANTS = {"user_id": None, "object_key": None}
"""Report fields naming the host application's users (the key holds the user id)."""
REPORT_PAGE_ROWS = 500
"""Rows of a whole report read from PostgreSQL at once: what a download keeps in memory."""
READS_RETRY_AFTER_S = 1
"""Retry-After of a tenant over its reads in flight: they take milliseconds each."""
REPORTS_RETRY_AFTER_S = 5
"""Retry-After of a tenant over its report downloads: one takes seconds, or as long as its
reader is slow."""
T = TypeVar("T")


@dataclass
class BatchService:
    settings: Settings
    redis: Redis
    lifecycle: Lifecycle
    pool: asyncpg.Pool
    batch_store: BatchStore
    file_store: FileStore
    storage: Storage
    publisher: PdfBatchPublisher | None = None
    """Set in Kubernetes mode (PDFQUEUE_KUBERNETES_NAMESPACE): one PdfBatch per upload."""
    quotas: Quotas = field(init=False)
    eraser: Eraser = field(init=False)
    reads: TenantSlots = field(init=False)
    """Each tenant's reads in flight in this process (PDFQUEUE_QUOTA_CONCURRENT_READS)."""
    reports: TenantSlots = field(init=False)
    """Each tenant's whole reports streaming from this process
    (PDFQUEUE_QUOTA_CONCURRENT_REPORTS)."""

    def __post_init__(self) -> None:
        self.quotas = Quotas(self.redis, self.batch_store, self.settings)
        reads, reports = (
            self.settings.quota_concurrent_reads,
            self.settings.quota_concurrent_reports,
        )
        self.reads = TenantSlots("concurrent_reads", reads, READS_RETRY_AFTER_S)
        self.reports = TenantSlots("concurrent_reports", reports, REPORTS_RETRY_AFTER_S)
        retention = RetentionStore.of(self.pool, self.settings)
        self.eraser = Eraser(retention, self.lifecycle, self.storage, self.settings)

    @asynccontextmanager
    async def admitted(self, tenant: str, declared_bytes: int) -> AsyncIterator[Admission]:
        """Hold an upload slot of `tenant` while the body streams in (429 when none is left).

        The slot is freed if the upload fails; once it is a batch, the batch's row counts.
        """
        async with _holding(await self.quotas.admit(tenant, declared_bytes)) as admission:
            yield admission

    async def check_callback(self, tenant: str, url: str | None) -> None:
        """A callback_url the worker will call (or none): https to public addresses, and the
        tenant has a signing secret (UnsafeCallback, a 422, otherwise)."""
        if url is None:
            return
        if tenant not in self.settings.webhook_secrets:
            raise UnsafeCallback(url, "no webhook secret is configured for this tenant")
        allow = self.settings.webhook_allow_http_loopback
        try:
            await asyncio.wait_for(webhooks.checked(url, allow_http_loopback=allow), 5)
        except TimeoutError:
            raise UnsafeCallback(url, "its host did not resolve in time") from None

    async def ping(self) -> None:
        """Fail fast, before reading a byte of the upload, when Redis or PostgreSQL is down,
        or Redis nearly full (`room`)."""
        await _guard("redis", self.lifecycle.ping())
        await _guard("postgresql", ping(self.pool))
        await self.room()

    async def room(self) -> None:
        """RedisNearlyFull past PDFQUEUE_REDIS_MEMORY_REFUSE_SHARE, DatabaseNearlyFull past
        PDFQUEUE_DATABASE_CONNECTIONS_REFUSE_SHARE, StorageRefusingWrites while the object
        store refuses writes (each 503, Retry-After)."""
        share = await _guard("redis", memory_share(self.redis))
        if share is not None and share >= self.settings.redis_memory_refuse_share:
            raise RedisNearlyFull(share)
        use = await _guard("postgresql", connection_use(self.pool))
        if use.share >= self.settings.database_connections_refuse_share:
            raise DatabaseNearlyFull(use.used, use.limit)
        if self.storage.writes.refused is not None:
            with contextlib.suppress(PdfQueueError):  # the probe's failure is kept in `writes`
                await _guard("storage", self.storage.probe_write())
            if (why := self.storage.writes.refused) is not None:
                raise StorageRefusingWrites(why)

    async def create(
        self,
        tenant: str,
        chunks: AsyncIterator[bytes],
        batch_id: str | None = None,
        name: Callable[[], str | None] = lambda: None,
        callback: str | None = None,
    ) -> str:
        """Store the ZIP, create the batch, enqueue `ingest`; undo it all on any failure.

        `name` gives the uploaded file's name once the body is read (a multipart body
        names it in its part's headers); it is sanitised here.
        """
        await self.ping()
        batch_id = batch_id or uuid.uuid4().hex
        tracing.annotate(batch_id=batch_id)
        if callback:  # kept first, so the batch can never complete without it
            await _guard("postgresql", callbacks.remember(self.pool, batch_id, callback))
        key = keys.upload(batch_id)
        try:
            await store_upload(
                self.storage,
                key,
                chunks,
                tenant=tenant,
                max_bytes=self.settings.max_upload_bytes,
                part_bytes=self.settings.upload_part_bytes,
                directory_limits=DirectoryLimits.from_settings(self.settings),
            )
        except ClientDisconnect as exc:
            raise UploadAborted from exc
        try:
            file_name = display_name(name())
            registered = self.lifecycle.register(
                batch_id=batch_id, tenant=tenant, source_key=key, file_name=file_name
            )
            await _guard("queue", registered)
        except BaseException:
            await asyncio.shield(self._undo(batch_id, key))
            raise
        log.info("batch created", extra={"batch_id": batch_id})
        if self.publisher is not None:
            await self.publisher.publish(batch_id, self.storage.url(key), tenant)
        return batch_id

    async def _undo(self, batch_id: str, key: str) -> None:
        for step in (self.storage.delete(key), callbacks.forget(self.pool, batch_id)):
            try:  # best effort: the service that failed may still be down
                await asyncio.wait_for(step, DEPENDENCY_TIMEOUT_S)
            except Exception as exc:
                log.warning("clean-up step failed: %r", exc, extra={"batch_id": batch_id})
        await self.lifecycle.unregister(batch_id, DEPENDENCY_TIMEOUT_S)

    async def get(self, tenant: str, batch_id: str) -> BatchSummary:
        """The batch of `tenant` (404 for unknown batches and everybody else's)."""
        return await _guard("batch state", self.lifecycle.reads.read_for(tenant, batch_id))

    async def cancel(self, tenant: str, batch_id: str) -> BatchSummary:
        """Drop pending work; running jobs finish and are counted; the batch ends CANCELLED."""
        summary = await self.get(tenant, batch_id)
        if summary.status in TERMINAL:  # maybe only in Redis: an earlier cancel may have died
            await _guard("queue", self.lifecycle.settle(batch_id))
            return summary
        dropped = await self.lifecycle.cancel(batch_id)
        log.info("batch cancelled, %d pending jobs dropped", dropped, extra={"batch_id": batch_id})
        return await self.get(tenant, batch_id)

    async def delete(
        self, tenant: str, batch_id: str, *, erase: bool
    ) -> BatchSummary | BatchErasure:
        """`DELETE /v1/batches/{id}`: cancel, or with `erase` erase."""
        return await (self.erase if erase else self.cancel)(tenant, batch_id)

    async def erase(self, tenant: str, batch_id: str) -> BatchErasure:
        """Erase the batch of `tenant` and everything it made (404 for anybody else's)."""
        erased = await _guard("erasure", self.eraser.erase_batch(batch_id, tenant=tenant))
        log.info(
            "batch erasure %s",
            "done" if erased.done else "waits for its last jobs",
            extra={"batch_id": batch_id},
        )
        return erased

    async def retry(self, tenant: str, batch_id: str, *, all_failed: bool) -> BatchSummary:
        """Re-run the completed batch's failed files (transient ones unless `all_failed`).

        A round is the batch running again: it holds a concurrent-batch slot from before it
        starts until it ends, as an upload does, and counts against retries_per_hour (429
        with Retry-After past either); a refused one (409) counts for neither."""
        await self.get(tenant, batch_id)  # 404 for unknown or foreign batches
        await self.room()
        async with _holding(await self.quotas.admit_retry(tenant, batch_id)) as admission:
            try:
                await _guard("queue", self.lifecycle.requeue(batch_id, all_failed=all_failed))
            except BatchNotRetryable:  # no round started: not a retry the rate counts
                with contextlib.suppress(ServiceUnavailable):
                    await admission.withdrawn()
                raise
        log.info("batch retry started", extra={"batch_id": batch_id})
        return await self.get(tenant, batch_id)

    async def files(self, tenant: str, batch_id: str) -> AsyncIterator[FileResult]:
        """The per-file report, REPORT_PAGE_ROWS rows in memory at a time; which user a file
        went to is shown to trusted tenants only.

        Keyset pages, not a server-side cursor: a cursor would hold a PostgreSQL connection
        for as long as the client takes to read, where a page holds one (and one of the
        tenant's read slots) only while it is fetched."""
        async with self.reads.held(tenant, wait_s=None):  # the report was admitted
            await self.get(tenant, batch_id)  # 404 for unknown or foreign batches
        trusted = tenant in self.settings.trusted_tenants
        after = -1
        while True:
            async with self.reads.held(tenant, wait_s=None):
                page = self.file_store.read(batch_id, after=after, limit=REPORT_PAGE_ROWS)
                rows = await _guard("postgresql", page)
            if not rows:
                return
            for row in rows:
                yield row if trusted else row.model_copy(update=HIDDEN_FROM_TENANTS)
            after = rows[-1].index

    async def batches(self, tenant: str, cursor: str | None, limit: int) -> BatchPage:
        """`tenant`'s batches newest first; running ones show their live counters."""
        before = decode_cursor(cursor) if cursor else None
        try:
            rows = await _guard(
                "postgresql", self.batch_store.newest(tenant, before=before, limit=limit + 1)
            )
        except InvalidData as exc:  # a value the checks above missed: still the cursor's fault
            raise InvalidCursor from exc
        page = [await _guard("redis", self.lifecycle.reads.live(row)) for row in rows[:limit]]
        more = len(rows) > limit
        return BatchPage(batches=page, next_cursor=encode_cursor(page[-1]) if more else None)

    async def file_page(self, tenant: str, batch_id: str, query: FileQuery) -> FilePage:
        """One page of the report, filtered and sorted in PostgreSQL (an index each)."""
        await self.get(tenant, batch_id)  # 404 for unknown or foreign batches
        total, rows = await _guard("postgresql", self.file_store.page(batch_id, query))
        reasons = await _guard("postgresql", self.file_store.reason_counts(batch_id))
        if tenant not in self.settings.trusted_tenants:
            rows = [row.model_copy(update=HIDDEN_FROM_TENANTS) for row in rows]
        return FilePage(
            total=total, offset=query.offset, limit=query.limit, files=rows, reasons=reasons
        )

    async def read(self, batch_id: str) -> BatchSummary | None:
        """A batch's state for the event feed (the tenant was checked when the stream opened)."""
        found = await _guard("batch state", self.lifecycle.reads.read(batch_id))
        return found.summary if found is not None else None


@asynccontextmanager
async def _holding(admission: Admission) -> AsyncIterator[Admission]:
    """Keep an admission's slot while the block runs: freed if it fails (its try stays
    counted), left to the batch's unfinished row once it succeeds."""
    try:
        yield admission
    except BaseException:
        with contextlib.suppress(Exception):  # best effort: Redis may be what failed
            await asyncio.shield(admission.abandoned())
        raise
    with contextlib.suppress(ServiceUnavailable):  # the batch runs: a 503 would lie
        await admission.accepted()  # if Redis missed this, the ticket expires by itself


def encode_cursor(last: BatchSummary) -> str:
    """An opaque cursor after `last`: its creation time and id."""
    raw = json.dumps([last.created_at.isoformat(), last.batch_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MAX_CURSOR_CHARS = 256
"""Longer than any cursor `encode_cursor` makes (about 110 characters)."""


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """(created_at, batch id) of a cursor we handed out; InvalidCursor for anything else.

    Each field is checked by range as well as by form, before it reaches a query: the time
    must be a timezone-aware instant that is still one in UTC (what PostgreSQL is sent), the
    id a batch id. A cursor failing either would otherwise be refused by the database.
    """
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidCursor
    try:
        fields = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(fields, list) or len(fields) != 2:
            raise InvalidCursor
        created, batch_id = fields
        if not isinstance(created, str) or not keys.is_batch_id(batch_id):
            raise InvalidCursor
        when = datetime.fromisoformat(created)
        if when.tzinfo is None or when.utcoffset() is None:
            raise InvalidCursor
        when = when.astimezone(UTC)  # OverflowError past year 1 or 9999 in UTC
    except (binascii.Error, ValueError, TypeError, OverflowError, RecursionError) as exc:
        raise InvalidCursor from exc
    return when, batch_id


async def _guard(service: str, awaitable: Awaitable[T]) -> T:
    """Await a store call with a deadline: no answer in time is a 503 (the stores type their
    own failures)."""
    try:
        return await asyncio.wait_for(awaitable, DEPENDENCY_TIMEOUT_S)
    except TimeoutError as exc:
        raise ServiceUnavailable(service, f"no answer within {DEPENDENCY_TIMEOUT_S:g} s") from exc
