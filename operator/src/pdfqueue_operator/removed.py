"""PdfBatch objects whose batch was purged or erased: their status trimmed, never deleted.

The objects are the user's (`kubectl apply`): the operator's RBAC has no delete on them by
design, so deleting one stays the user's `kubectl delete`. What the operator owes them is a
status that keeps nothing of the batch's files (no counters, no message derived from them),
says the batch was purged or erased and when (the audit record's time), and is never taken
for a batch to run again. It learns of removals from the audit trail: on resume for each
object (`BatchReconciler.ensure`), and from a loop over the records written since it started.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdfqueue.stores.postgres.retention import Removal, RetentionStore
from pdfqueue_operator.kube import Kube
from pdfqueue_operator.model import ObjectRef
from pdfqueue_operator.status import ACCEPTED, FINISHED, Condition, with_condition

log = logging.getLogger(__name__)
REMOVED = "Removed"
"""True once the batch was purged or erased; its reason is Purged or Erased."""
PHASES = {"purge": "PURGED", "erase_batch": "ERASED"}
REMOVED_PHASES = frozenset(PHASES.values())
TRIMMED = (
    "totalFiles",
    "processed",
    "linked",
    "skippedNoMatch",
    "skippedAlreadyExists",
    "skippedAmbiguous",
    "failed",
    "ignored",
)
"""Status fields counted from the batch's files: set to null (a merge patch removes them)."""
ATTEMPTS = 3


def _iso(removal: Removal) -> str:
    return removal.at.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def removed_status(
    removal: Removal, generation: int | None, conditions: Sequence[Mapping[str, Any]] | None
) -> dict[str, Any]:
    """The whole status of an object whose batch is gone, as a merge patch."""
    phase = PHASES[removal.action]
    reason = phase.title()
    at = _iso(removal)
    done = "purged by retention" if removal.action == "purge" else "erased by its tenant"
    message = (
        f"batch {removal.batch_id} {done} at {at}: its report and files are gone. Delete this"
        " object with kubectl delete once you no longer need it (the operator never deletes it)"
    )
    kept = [dict(c) for c in conditions or () if c.get("type") == ACCEPTED]
    finished = with_condition(kept, FINISHED, True, reason, message, generation=generation)
    removed: Condition = {
        "type": REMOVED,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }
    if generation is not None:
        removed["observedGeneration"] = generation
    status: dict[str, Any] = {
        "phase": phase,
        "batchId": removal.batch_id,
        "message": message,
        "conditions": [*finished, removed],
        **dict.fromkeys(TRIMMED),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


async def trim(kube: Kube, ref: ObjectRef, removal: Removal) -> bool:
    """Write the removed status into the object if it still shows that batch; whether it
    was written. Only an object whose status the operator wrote for this batch is touched
    (an annotation alone is a claim, not a binding)."""
    for _ in range(ATTEMPTS):  # a conflict is kopf's own patch meanwhile: read again
        body = await kube.get_pdfbatch(ref)
        if body is None:
            return False
        meta, old = body["metadata"], body.get("status") or {}
        if old.get("batchId") != removal.batch_id or old.get("phase") in REMOVED_PHASES:
            return False
        status = removed_status(removal, meta.get("generation"), old.get("conditions"))
        if await kube.patch_pdfbatch_status(ref, status, meta["resourceVersion"]):
            log.info(
                "PdfBatch %s/%s: batch %s %s",
                ref.namespace,
                ref.name,
                removal.batch_id,
                PHASES[removal.action].lower(),
            )
            return True
    return False


@dataclass
class RemovedBatches:
    """The leader's loop over the audit trail: each batch removal recorded since it started
    trims the objects that show that batch (`objects`: batch id -> refs, a kopf index)."""

    retention: RetentionStore
    kube: Kube
    objects: Mapping[str, Iterable[ObjectRef]]
    after_id: int

    @classmethod
    async def start(
        cls, retention: RetentionStore, kube: Kube, objects: Mapping[str, Iterable[ObjectRef]]
    ) -> RemovedBatches:
        """Removals before now are for resume to find (every object is reconciled then)."""
        return cls(retention, kube, objects, await retention.last_audit_id())

    async def step(self) -> None:
        while page := await self.retention.removals_after(self.after_id):
            for removal in page:
                for ref in list(self.objects.get(removal.batch_id, ())):
                    await trim(self.kube, ref, removal)
                self.after_id = removal.id
