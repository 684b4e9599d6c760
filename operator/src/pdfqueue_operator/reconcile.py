"""PdfBatch reconciliation: queue the batch once, mirror its progress, cancel it when deleted."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from redis.asyncio import Redis

from pdfqueue import keys
from pdfqueue.batches import cancel_batch, read_batch, register_batch
from pdfqueue.db import Database
from pdfqueue.errors import ObjectNotFound
from pdfqueue.models import TERMINAL, BatchSummary
from pdfqueue.settings import Settings
from pdfqueue.state import BatchState
from pdfqueue.storage import Storage
from pdfqueue_operator.kube import Kube
from pdfqueue_operator.model import ObjectRef, PdfBatchObject
from pdfqueue_operator.status import progress

log = logging.getLogger(__name__)


@dataclass
class BatchReconciler:
    settings: Settings
    redis: Redis
    db: Database
    state: BatchState
    storage: Storage
    kube: Kube
    _written: dict[str, str] = field(default_factory=dict, repr=False)
    """batch id -> the summary last written into its object, so unchanged ones cost nothing."""

    @property
    def tracking_key(self) -> str:
        return keys.operator_batches(self.settings.queue_name)

    async def ensure(self, obj: PdfBatchObject) -> BatchSummary:
        """Register and enqueue the object's batch (once), and start mirroring its progress.

        Raises SourceOutsideBucket (permanent) or ObjectNotFound (the ZIP is not there yet).
        An object the API created finds its batch registered already: nothing new is queued.
        """
        key = self.storage.key_from_url(obj.spec.source)
        batch_id = obj.batch_id
        known = await read_batch(self.db, self.state, batch_id)
        if known is None and not await self.storage.exists(key):
            raise ObjectNotFound(obj.spec.source)
        summary = await register_batch(
            self.db,
            self.state,
            self.redis,
            self.settings.queue_name,
            batch_id=batch_id,
            tenant=obj.spec.tenant,
            source_key=key,
        )
        if summary.status not in TERMINAL:
            await self.redis.hset(self.tracking_key, batch_id, obj.ref.dumps())  # type: ignore[misc]
        return await read_batch(self.db, self.state, batch_id) or summary

    async def forget(self, batch_id: str) -> int | None:
        """Its object is gone: cancel the batch unless finished (returns jobs dropped)."""
        summary = await read_batch(self.db, self.state, batch_id)
        dropped = None
        if summary is not None and summary.status not in TERMINAL:
            dropped = await cancel_batch(
                self.db, self.state, self.redis, self.settings.queue_name, batch_id
            )
            log.info("PdfBatch deleted: batch %s cancelled, %d jobs dropped", batch_id, dropped)
        await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
        self._written.pop(batch_id, None)
        return dropped

    async def mirror(self) -> None:
        """One pass: copy each tracked batch's progress into its object, until it is terminal."""
        tracked: dict[bytes, bytes] = await self.redis.hgetall(self.tracking_key)  # type: ignore[misc]
        for raw_id, raw_ref in tracked.items():
            batch_id = raw_id.decode()
            try:
                await self._mirror_one(batch_id, ObjectRef.loads(raw_ref))
            except Exception:  # one object's trouble must not hold up the others
                log.exception("could not mirror batch %s", batch_id)

    async def _mirror_one(self, batch_id: str, ref: ObjectRef) -> None:
        summary = await read_batch(self.db, self.state, batch_id)
        if summary is None:  # its rows were deleted: nothing left to mirror
            await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
            return
        fingerprint = summary.model_dump_json()
        if self._written.get(batch_id) == fingerprint:
            return
        body = await self.kube.get_pdfbatch(ref)
        if body is None:
            # Deleted while nobody watched (the operator was down: there is no finalizer).
            log.info("PdfBatch %s/%s is gone", ref.namespace, ref.name)
            await self.forget(batch_id)
            return
        meta, old = body["metadata"], body.get("status") or {}
        status = progress(summary, meta.get("generation"), old.get("conditions"))
        if not await self.kube.patch_pdfbatch_status(ref, status, meta["resourceVersion"]):
            return  # changed meanwhile (kopf's own patches): the next pass writes it
        self._written[batch_id] = fingerprint
        if summary.status in TERMINAL:
            await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
            self._written.pop(batch_id, None)
