"""What a batch looks like now: its live state in Redis while it runs, its durable row in
PostgreSQL once that expired. Reads only; the transitions are `Lifecycle`'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdfqueue.domain.errors import BatchNotFound
from pdfqueue.domain.models import TERMINAL, BatchStatus, BatchSummary, OwnedBatch
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.redis.state import BatchState


@dataclass(frozen=True)
class BatchReads:
    """A batch's summary, status and undecided files, from the live state first."""

    batches: BatchStore
    state: BatchState

    async def read(self, batch_id: str) -> OwnedBatch | None:
        """The live summary and its tenant, or the durable ones once the live state expired;
        None if unknown."""
        live = await self.state.read(batch_id)
        if live is not None:
            return live
        row = await self.batches.get(batch_id)
        return OwnedBatch(row.summary, row.tenant) if row is not None else None

    async def read_for(self, tenant: str, batch_id: str) -> BatchSummary:
        """The batch of `tenant`; BatchNotFound for unknown batches and everybody else's."""
        found = await self.read(batch_id)
        if found is None or found.tenant != tenant:
            raise BatchNotFound(batch_id)
        return found.summary

    async def live(self, durable: BatchSummary) -> BatchSummary:
        """A durable summary with the live counters of a batch still running."""
        if durable.status in TERMINAL:
            return durable
        live = await self.state.read(durable.batch_id)
        if live is None:
            return durable
        return live.summary.model_copy(update={"file_name": durable.file_name})

    async def tenant(self, batch_id: str) -> str | None:
        """The batch's tenant: one field of the live state, else the durable row's."""
        live = await self.state.tenant(batch_id)
        if live:
            return live
        row = await self.batches.get(batch_id)
        return row.tenant if row is not None else None

    async def status(self, batch_id: str) -> BatchStatus | None:
        """The live status (None once the live state expired)."""
        return await self.state.status(batch_id)

    async def unrecorded(self, batch_id: str, indexes: Sequence[int]) -> list[int]:
        """Those of `indexes` without an outcome yet (what a retried job still has to do)."""
        return await self.state.unrecorded(batch_id, indexes)

    async def buried(self, batch_id: str) -> bool:
        """Whether the batch's erasure has been accepted: a job of it must not start."""
        return await self.state.buried(batch_id)

    async def live_brief(self, batch_ids: Sequence[str]) -> dict[str, tuple[BatchStatus, int]]:
        """Each batch's live status and processed count, for those with live state."""
        return await self.state.brief(batch_ids) if batch_ids else {}
