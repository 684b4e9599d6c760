"""Live batch state in Redis: creation, once-only outcome recording, status reads."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import cast

from redis.asyncio import Redis
from redis.exceptions import WatchError

from pdfqueue.domain import keys
from pdfqueue.domain.models import (
    COUNTERS,
    TERMINAL,
    BatchStatus,
    BatchSummary,
    Outcome,
    OwnedBatch,
)
from pdfqueue.stores.driver_errors import redis_connection_lost, redis_errors, typed_methods
from pdfqueue.stores.redis.scripts import lua

_RECORD = lua("record_outcome")
_START = lua("start_batch")
_RETRY = lua("retry_batch")
_UNTRACK = lua("untrack_ended")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Recorded(IntEnum):
    MISSING = -1
    """The batch's live state expired; rebuild it from PostgreSQL and record again."""
    DUPLICATE = 0
    """This file already had an outcome: a retry or a second delivery, nothing counted."""
    COUNTED = 1
    COMPLETED_BATCH = 2
    """This file was the last one: the batch is now COMPLETED."""


@dataclass(frozen=True)
class Recording:
    """What one recording call did: a code per file, and the batch's status after it."""

    codes: list[Recorded]
    status: str
    """"" when the live state has expired (every code is then MISSING)."""


@typed_methods(redis_errors)
@dataclass(frozen=True)
class BatchState:
    """Operations on one Redis; every write refreshes the batch's TTL."""

    redis: Redis
    ttl_s: int

    async def ping(self) -> None:
        await self.redis.ping()

    async def create(
        self, batch_id: str, tenant: str, created_at: datetime, file_name: str | None = None
    ) -> bool:
        """Create live state for a new batch; existing state is left alone (returns False)."""
        key = keys.batch(batch_id)
        if not await self.redis.hsetnx(key, "status", BatchStatus.PENDING.value):  # type: ignore[misc]
            return False
        fields: dict[str, str | int] = {
            "tenant": tenant,
            "created_at": created_at.isoformat(),
            "processed": 0,
            "ignored": 0,
            **dict.fromkeys(COUNTERS, 0),
        }
        if file_name:
            fields["file_name"] = file_name
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=fields)
            pipe.expire(key, self.ttl_s)
            await pipe.execute()
        return True

    async def delete(self, batch_id: str) -> None:
        """Forget the live state (an upload that never became a batch)."""
        await self.redis.delete(keys.batch(batch_id), keys.outcomes(batch_id))

    async def restore(self, summary: BatchSummary, tenant: str, outcomes: dict[int, str]) -> bool:
        """Rebuild missing live state from the durable record (it expired, or Redis lost it),
        unless live state is there by now (returns False). Never over live state: a file
        recorded meanwhile counts in it already, and would be lost from an older read."""
        key, done = keys.batch(summary.batch_id), keys.outcomes(summary.batch_id)
        fields: dict[str, str | int] = {
            "status": summary.status.value,
            "tenant": tenant,
            "created_at": summary.created_at.isoformat(),
            "processed": len(outcomes),
            "ignored": summary.ignored,
            "retries": summary.retries,
            **{c: sum(1 for o in outcomes.values() if o == c) for c in COUNTERS},
        }
        if summary.total_files is not None:
            fields["total_files"] = summary.total_files
        if summary.file_name:
            fields["file_name"] = summary.file_name
        if summary.status in TERMINAL:
            fields["completed_at"] = (summary.completed_at or utcnow()).isoformat()
        for name, value in (("error", summary.error), ("reason", summary.reason)):
            if value:
                fields[name] = value
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(key)
            if await pipe.exists(key):
                return False
            pipe.multi()  # type: ignore[no-untyped-call]
            pipe.delete(done)  # outcomes are only written beside the batch hash: stale ones
            pipe.hset(key, mapping=fields)
            if outcomes:
                pipe.hset(done, mapping={str(i): o for i, o in outcomes.items()})
            pipe.expire(key, self.ttl_s)
            pipe.expire(done, self.ttl_s)
            try:
                await pipe.execute()
            except WatchError as exc:
                if redis_connection_lost(exc):  # not a write: Redis went away
                    raise
                return False  # written meanwhile, by another restore or `create`
        return True

    async def brief(self, batch_ids: Sequence[str]) -> dict[str, tuple[BatchStatus, int]]:
        """Each batch's live status and processed count, for those with live state, in one
        round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for batch_id in batch_ids:
                pipe.hmget(keys.batch(batch_id), ["status", "processed"])
            found = await pipe.execute()
        return {
            b: (BatchStatus(_text(status)), int(processed or 0))
            for b, (status, processed) in zip(batch_ids, found, strict=True)
            if status
        }

    async def start(self, batch_id: str, total_files: int, ignored: int) -> BatchStatus | None:
        status = await self.redis.eval(  # type: ignore[misc]
            _START,
            1,
            keys.batch(batch_id),
            str(total_files),
            str(ignored),
            str(self.ttl_s),
            utcnow().isoformat(),
        )
        return BatchStatus(_text(status)) if status else None

    async def record(self, batch_id: str, outcomes: Sequence[tuple[int, Outcome]]) -> Recording:
        """Record (file index, outcome) pairs once each, in one script call.

        Returns a code per pair and the batch status after them; every code is MISSING
        when the live state has expired.
        """
        argv = [str(self.ttl_s), utcnow().isoformat()]
        for index, outcome in outcomes:
            argv += [str(index), outcome.value]
        status, *codes = await self.redis.eval(  # type: ignore[misc]
            _RECORD, 2, keys.batch(batch_id), keys.outcomes(batch_id), *argv
        )
        if not status:
            return Recording([Recorded.MISSING] * len(outcomes), "")
        return Recording([Recorded(int(c)) for c in codes], _text(status))

    async def unrecorded(self, batch_id: str, indexes: Sequence[int]) -> list[int]:
        """Those of `indexes` without an outcome yet (what a retried job still has to do)."""
        if not indexes:
            return []
        done = await cast(
            Awaitable[list[bytes | None]],
            self.redis.hmget(keys.outcomes(batch_id), [str(i) for i in indexes]),
        )
        return [i for i, d in zip(indexes, done, strict=True) if d is None]

    async def reset_for_retry(self, batch_id: str, number: int, files: Sequence[int]) -> str:
        """A retry round's live step, once per round number: the files' outcomes are
        forgotten and their counters given back, the batch PROCESSING again. Returns
        'started', 'running' (done already) or 'missing' (the live state expired)."""
        outcome = await self.redis.eval(  # type: ignore[misc]
            _RETRY,
            2,
            keys.batch(batch_id),
            keys.outcomes(batch_id),
            str(self.ttl_s),
            str(number),
            *(str(i) for i in files),
        )
        return _text(outcome)

    async def untrack_ended(self, batch_id: str, tracking_key: str) -> bool:
        """Drop the batch from `tracking_key` (a hash by batch id) in the same step that
        finds its live status terminal or expired; False (kept) while a round runs."""
        dropped = await self.redis.eval(  # type: ignore[misc]
            _UNTRACK,
            2,
            keys.batch(batch_id),
            tracking_key,
            batch_id,
            *sorted(s.value for s in TERMINAL),
        )
        return bool(dropped)

    async def set_status(
        self,
        batch_id: str,
        status: BatchStatus,
        error: str | None = None,
        *,
        reason: str | None = None,
        counts: Mapping[str, int] | None = None,
    ) -> None:
        """Force a terminal status (FAILED, CANCELLED), with why (`error`, `reason`) and
        counters to set in the same step (`counts`); expired state stays expired."""
        if not await self.redis.exists(keys.batch(batch_id)):
            return
        mapping = {"status": status.value, "completed_at": utcnow().isoformat()}
        mapping.update({k: str(v) for k, v in (counts or {}).items()})
        if error:
            mapping["error"] = error
        if reason:
            mapping["reason"] = reason
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.batch(batch_id), mapping=mapping)
            pipe.expire(keys.batch(batch_id), self.ttl_s)
            await pipe.execute()

    async def bury(self, batch_id: str, for_ms: int) -> None:
        """Leave the tombstone of an accepted erasure for `for_ms`: no job of the batch
        starts or registers work while it stands. Tombstones past their time are pruned."""
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(keys.ERASED, "-inf", now_ms)
            pipe.zadd(keys.ERASED, {keys.checked(batch_id): now_ms + for_ms})
            await pipe.execute()

    async def buried(self, batch_id: str) -> bool:
        """Whether the batch's erasure has been accepted (and its tombstone stands)."""
        until = await self.redis.zscore(keys.ERASED, keys.checked(batch_id))
        return until is not None and until > datetime.now(UTC).timestamp() * 1000

    async def tenant(self, batch_id: str) -> str | None:
        raw = await cast(Awaitable[bytes | None], self.redis.hget(keys.batch(batch_id), "tenant"))
        return _text(raw) if raw else None

    async def status(self, batch_id: str) -> BatchStatus | None:
        raw = await cast(Awaitable[bytes | None], self.redis.hget(keys.batch(batch_id), "status"))
        return BatchStatus(_text(raw)) if raw else None

    async def read(self, batch_id: str) -> OwnedBatch | None:
        """The live summary and its tenant, or None once the live state has expired."""
        raw = await cast(Awaitable[dict[bytes, bytes]], self.redis.hgetall(keys.batch(batch_id)))
        if not raw:
            return None
        h = {_text(k): _text(v) for k, v in raw.items()}
        summary = BatchSummary(
            batch_id=batch_id,
            status=BatchStatus(h["status"]),
            total_files=int(h["total_files"]) if "total_files" in h else None,
            processed=int(h.get("processed", 0)),
            ignored=int(h.get("ignored", 0)),
            error=h.get("error"),
            reason=h.get("reason"),
            created_at=datetime.fromisoformat(h["created_at"]),
            completed_at=datetime.fromisoformat(h["completed_at"]) if "completed_at" in h else None,
            file_name=h.get("file_name"),
            retries=int(h.get("retries", 0)),
            **{c: int(h.get(c, 0)) for c in COUNTERS},
        )
        return OwnedBatch(summary, h.get("tenant", ""))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
