"""PdfBatch reconciliation: queue the batch once, mirror its progress, cancel it when deleted.

A batch is bound to one object, once, in PostgreSQL (`pdfbatch_uid`): the object that created
it, or the first object that adopted it through the API's annotation with matching tenant and
source. Only that object's status gets its progress, and only that object's deletion cancels it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import ObjectNotFound
from pdfqueue.domain.models import TERMINAL
from pdfqueue.domain.pdfbatch import DEFAULT_TENANT
from pdfqueue.domain.settings import Settings
from pdfqueue.domain.tenants import valid_tenant
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.retention import RetentionStore
from pdfqueue.stores.storage import Storage
from pdfqueue_operator.errors import BatchNotAdoptable, SourceNotAllowed, TenantNotAllowed
from pdfqueue_operator.kube import Kube
from pdfqueue_operator.model import ObjectRef, PdfBatchObject
from pdfqueue_operator.removed import REMOVED_PHASES, trim
from pdfqueue_operator.status import progress

log = logging.getLogger(__name__)
ANY_TENANT = "*"


@dataclass
class BatchReconciler:
    settings: Settings
    redis: Redis
    batches: BatchStore
    lifecycle: Lifecycle
    storage: Storage
    kube: Kube
    own_namespace: str | None = None
    """The operator's own namespace (in a pod): trusted like a namespace mapped to `*`."""
    _written: dict[str, str] = field(default_factory=dict, repr=False)
    """batch id -> the summary last written into its object, so an unchanged one costs one
    read of its object (is it still there?) and no write."""

    @property
    def tracking_key(self) -> str:
        return keys.operator_batches(self.settings.queue_name)

    @property
    def namespace_tenants(self) -> dict[str, str]:
        """Namespace -> tenant (or `*`); the API's and the operator's own namespaces trust
        their writers (the API creates its PdfBatches there, for every tenant)."""
        trusted = [ns for ns in (self.settings.kubernetes_namespace, self.own_namespace) if ns]
        return dict.fromkeys(trusted, ANY_TENANT) | self.settings.operator_namespace_tenants

    def tenant_of(self, obj: PdfBatchObject) -> str:
        """The object's tenant, from its namespace: never from what the object itself says."""
        namespace, wanted = obj.ref.namespace, obj.spec.tenant
        mapped = self.namespace_tenants.get(namespace)
        if mapped is None:
            msg = f"namespace {namespace!r} has no tenant (PDFQUEUE_OPERATOR_NAMESPACE_TENANTS)"
            raise TenantNotAllowed(msg)
        if mapped != ANY_TENANT:
            if wanted not in {mapped, DEFAULT_TENANT}:
                msg = f"spec.tenant {wanted[:63]!r} is not the tenant of namespace {namespace!r}"
                raise TenantNotAllowed(msg)
            return mapped
        if not valid_tenant(wanted):
            raise TenantNotAllowed(f"spec.tenant {wanted[:63]!r} is not a valid tenant name")
        return wanted

    async def ensure(self, obj: PdfBatchObject) -> None:
        """Register and enqueue the object's batch, or adopt the API's (once), and track it.

        Tracked whatever its state, so the status loop is the one writer of its progress: a
        batch that ended before its object was first seen (an API upload that ran while the
        operator was down or its watch was late) gets the reference a retry tracks it again by
        (`Lifecycle.requeue`) like any other, instead of keeping its first end through a retry.

        An object whose status shows a batch that was purged or erased since gets the
        trimmed status of a removed batch (removed.py), and is never registered again.

        Raises a PermanentError when the object is refused (ObjectNotFound: the ZIP is not
        there yet). A refused object queues nothing and touches no batch.
        """
        if obj.shown_id == obj.batch_id and keys.is_batch_id(obj.batch_id):
            removal = await self.retention.removal(obj.batch_id)
            if removal is not None:
                if obj.phase not in REMOVED_PHASES:
                    await trim(self.kube, obj.ref, removal)
                return
        tenant = self.tenant_of(obj)
        key = self.storage.key_from_url(obj.spec.source)
        if obj.adopted_id is not None:
            batch_id = keys.checked(obj.adopted_id)
            bound = await self.batches.bind_pdfbatch(
                batch_id, obj.ref.uid, tenant=tenant, source_key=key
            )
            if bound is None:
                raise BatchNotAdoptable(batch_id)
        else:
            batch_id = obj.own_id
            await self._register(obj, batch_id, tenant, key)
        await self.redis.hset(self.tracking_key, batch_id, obj.ref.dumps())  # type: ignore[misc]

    @property
    def retention(self) -> RetentionStore:
        """The audit trail: a batch it records as purged or erased ran and is gone, and
        registering it again would run it again from a source that may be gone, or fail
        an object that succeeded."""
        return RetentionStore.of(self.batches.pool, self.settings)

    async def _register(self, obj: PdfBatchObject, batch_id: str, tenant: str, key: str) -> None:
        folder = f"{self.settings.operator_source_prefix}{tenant}/"
        if not key.startswith(folder):  # the key's segments are checked: a text prefix will do
            raise SourceNotAllowed(obj.spec.source, self.storage.url(folder))
        known = await self.lifecycle.reads.read(batch_id)
        if known is None and not await self.storage.exists(key):
            raise ObjectNotFound(obj.spec.source)
        await self.lifecycle.register(
            batch_id=batch_id,
            tenant=tenant,
            source_key=key,
            pdfbatch_uid=obj.ref.uid,
        )

    async def forget(self, batch_id: str, uid: str) -> int | None:
        """Object `uid` is gone: cancel its batch unless finished (returns jobs dropped).

        Nothing happens unless the batch is bound to that very object: deleting an object
        that merely named a batch (a forged annotation, a refused object) cancels nothing.
        """
        if not keys.is_batch_id(batch_id) or await self.batches.pdfbatch_uid(batch_id) != uid:
            return None
        found = await self.lifecycle.reads.read(batch_id)
        dropped = None
        if found is not None and found.summary.status not in TERMINAL:
            dropped = await self.lifecycle.cancel(batch_id)
            log.info("PdfBatch deleted: batch %s cancelled, %d jobs dropped", batch_id, dropped)
        await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
        self._written.pop(batch_id, None)
        return dropped

    async def mirror(self) -> None:
        """One pass: copy each tracked batch's progress into its object, until it is terminal,
        and cancel the batch of each object found gone."""
        tracked: dict[bytes, bytes] = await self.redis.hgetall(self.tracking_key)  # type: ignore[misc]
        for raw_id, raw_ref in tracked.items():
            batch_id = raw_id.decode(errors="replace")
            if not keys.is_batch_id(batch_id):  # never written by this code: drop it
                await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
                continue
            try:
                await self._mirror_one(batch_id, ObjectRef.loads(raw_ref))
            except Exception:  # one object's trouble must not hold up the others
                log.exception("could not mirror batch %s", batch_id)

    async def _mirror_one(self, batch_id: str, ref: ObjectRef) -> None:
        found = await self.lifecycle.reads.read(batch_id)
        if found is None:  # its rows were deleted: nothing left to mirror
            await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
            return
        summary = found.summary
        fingerprint = summary.model_dump_json()
        changed = self._written.get(batch_id) != fingerprint
        # Unchanged means written, so the binding was checked then (it never changes).
        if changed and await self.batches.pdfbatch_uid(batch_id) != ref.uid:
            # e.g. left by an older operator
            log.warning(
                "batch %s is not bound to PdfBatch %s/%s", batch_id, ref.namespace, ref.name
            )
            await self.redis.hdel(self.tracking_key, batch_id)  # type: ignore[misc]
            return
        # Looked at even when nothing changed: a batch no worker runs never changes, and if
        # its deletion was missed its queued jobs would keep the workers up for good.
        body = await self.kube.get_pdfbatch(ref)
        if body is None:
            # Deleted while nobody watched: the operator was down (there is no finalizer), or
            # kopf never delivered the DELETED (a watch restarted past it lists the objects
            # again, which shows no deletion; an event handler that failed is not retried).
            log.info("PdfBatch %s/%s is gone", ref.namespace, ref.name)
            await self.forget(batch_id, ref.uid)
            return
        if not changed:
            return
        meta, old = body["metadata"], body.get("status") or {}
        status = progress(summary, meta.get("generation"), old.get("conditions"))
        if summary.status in TERMINAL:
            # Kept while a retry is possible (the ZIP is there), so a retry can track it again;
            # written before the object shows the end, so a retry its reader starts finds it.
            finished = keys.operator_finished(self.settings.queue_name, batch_id)
            await self.redis.set(finished, ref.dumps(), ex=self.settings.retry_window_s)
        if not await self.kube.patch_pdfbatch_status(ref, status, meta["resourceVersion"]):
            return  # changed meanwhile (kopf's own patches): the next pass writes it
        self._written[batch_id] = fingerprint
        if summary.status in TERMINAL:
            # Not a drop and a look afterwards: a pass cut off in between (its timeout, a
            # Redis error, a shutdown) would lose a retry round that started meanwhile.
            await self.lifecycle.stop_tracking(batch_id)
            self._written.pop(batch_id, None)
