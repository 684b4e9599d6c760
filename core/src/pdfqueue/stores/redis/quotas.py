"""Per-tenant quotas in Redis: uploads per minute, retries per hour, bytes per day, and
concurrent batches (uploads and retries alike)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import QuotaExceeded, ServiceUnavailable
from pdfqueue.domain.settings import Quota, Settings
from pdfqueue.stores.driver_errors import redis_errors
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.redis.scripts import lua

T = TypeVar("T")
_ADMIT = lua("quota_admit")
_CHARGE = lua("quota_charge")

DEPENDENCY_TIMEOUT_S = 2.0
"""A quota step that takes longer than this answers 503, like every other dependency call."""
CHARGE_BYTES = 1024**2
"""Streamed bytes are counted every MiB: a tenant overruns its day by less than this."""
HOLD_S = 120.0
"""An upload in progress holds a concurrent-batch slot this long after it last streamed a
MiB (or CHARGE_INTERVAL_S passed); a crashed API process frees its slots after it."""
CHARGE_INTERVAL_S = 30.0
"""A slow upload renews its hold at least this often while bytes still arrive."""
CONCURRENT_RETRY_S = 30
"""Retry-After for a full concurrent-batches quota: a hint, as nobody knows when one ends."""
DAY_KEY_TTL_S = 2 * 24 * 3600


@dataclass(frozen=True)
class Quotas:
    """Checks and takes a tenant's quotas; each step is one Lua script (atomic in Redis)."""

    redis: Redis
    batches: BatchStore
    settings: Settings

    async def admit(self, tenant: str, declared_bytes: int) -> Admission:
        """Take an upload slot for `tenant`, or raise QuotaExceeded before a byte is read.

        The admission's ticket is the batch id the upload will get: the concurrent count
        takes the union of the tenant's unfinished batch rows and the tickets in flight, so
        an upload is counted once whether its row exists yet or not.
        """
        quota = self.settings.quota_for(tenant)
        now = datetime.now(UTC)
        admission = Admission(self, tenant, quota, day=now.strftime("%Y%m%d"))
        return await self._admit(admission, now, declared_bytes, quota.bytes_per_day)

    async def admit_retry(self, tenant: str, batch_id: str) -> Admission:
        """Take a retry slot for `tenant`'s batch, or raise QuotaExceeded: a retry round is
        a batch running again, so it takes a concurrent-batch slot on the same terms as an
        upload, and it counts against `retries_per_hour` (each round re-reads its files).

        The ticket names the batch (plus a part of its own, so two racing retries of one
        batch never drop each other's): the batch counts once, whether its row is
        unfinished already or only its ticket is in flight.
        """
        quota = self.settings.quota_for(tenant)
        now = datetime.now(UTC)
        admission = Admission(
            self,
            tenant,
            quota,
            day=now.strftime("%Y%m%d"),
            ticket=f"{keys.checked(batch_id)}:{uuid.uuid4().hex}",
            rate="retries",
        )
        return await self._admit(admission, now, 0, 0)

    async def _admit(
        self, admission: Admission, now: datetime, declared_bytes: int, bytes_per_day: int
    ) -> Admission:
        quota = admission.quota
        limit, window_s, name = admission.rate_limit
        reply: list[bytes] = await _script(
            self.redis,
            _ADMIT,
            [admission.rate_key, admission.day_key, admission.inflight_key],
            now.timestamp(),
            admission.ticket,
            limit,
            bytes_per_day,
            max(declared_bytes, 0),
            _seconds_left_in_day(now),
            quota.concurrent_batches,
            HOLD_S,
            CONCURRENT_RETRY_S,
            window_s,
            name,
        )
        if _text(reply[0]) != "ok":
            quota_name, quota_limit, retry_after_s = reply
            raise QuotaExceeded(_text(quota_name), int(quota_limit), int(retry_after_s))
        if quota.concurrent_batches:
            batches = {_text(t).partition(":")[0] for t in reply[1:]}
            await self._count_batches(admission, sorted(batches))
        return admission

    async def _count_batches(self, admission: Admission, uploading: list[str]) -> None:
        """Withdraw the admission if the tenant's batches, this one included, are too many.

        Read after the ticket went in: a racing upload either still has its ticket in
        `uploading` or already has its row, so none is missed (two racing for the last
        slot may both be refused, never both admitted).
        """
        limit = admission.quota.concurrent_batches
        try:
            active = await _bounded(
                "postgresql", self.batches.active_count(admission.tenant, uploading)
            )
        except BaseException:
            with contextlib.suppress(ServiceUnavailable):  # keep the error that matters
                await asyncio.shield(admission.withdrawn())
            raise
        if active > limit:
            await admission.withdrawn()
            raise QuotaExceeded("concurrent_batches", limit, CONCURRENT_RETRY_S)


@dataclass
class Admission:
    """One admitted upload: counts its bytes as they stream, then keeps or frees its slot."""

    quotas: Quotas
    tenant: str
    quota: Quota
    day: str
    ticket: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The batch id this upload gets once it is stored."""
    streamed: int = 0
    counted: int = 0
    counted_at: float = field(default_factory=time.monotonic)
    rate: str = "uploads"
    """Which starts this admission counts among: `uploads` (per minute) or `retries` (per
    hour)."""

    @property
    def rate_limit(self) -> tuple[int, int, str]:
        """The rate quota this admission counts against: (limit, window in s, its name)."""
        if self.rate == "retries":
            return self.quota.retries_per_hour, 3600, "retries_per_hour"
        return self.quota.uploads_per_minute, 60, "uploads_per_minute"

    @property
    def day_key(self) -> str:
        return keys.quota(self.tenant, f"bytes:{self.day}")

    @property
    def rate_key(self) -> str:
        return keys.quota(self.tenant, self.rate)

    @property
    def inflight_key(self) -> str:
        return keys.quota(self.tenant, "inflight")

    async def meter(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Pass `body` on, counting what actually arrives (not what Content-Length says)."""
        async for chunk in body:
            self.streamed += len(chunk)
            due = time.monotonic() - self.counted_at >= CHARGE_INTERVAL_S
            if due or self.streamed - self.counted >= CHARGE_BYTES:
                await self._count()
            yield chunk
        await self._count()

    async def _count(self) -> None:
        """Add the bytes not counted yet; QuotaExceeded once the day's total is over."""
        fresh = self.streamed - self.counted
        if not fresh:
            return
        self.counted, self.counted_at = self.streamed, time.monotonic()
        within = await _script(
            self.quotas.redis,
            _CHARGE,
            [self.day_key, self.inflight_key],
            fresh,
            self.quota.bytes_per_day,
            DAY_KEY_TTL_S,
            self.ticket,
            time.time() + HOLD_S,
        )
        if not within:
            retry_after_s = _seconds_left_in_day(datetime.now(UTC))
            raise QuotaExceeded("bytes_per_day", self.quota.bytes_per_day, retry_after_s)

    async def accepted(self) -> None:
        """The upload is a batch now (the retry's round started), and its unfinished row
        counts: drop its ticket."""
        await _redis(self.quotas.redis.zrem(self.inflight_key, self.ticket))

    async def abandoned(self) -> None:
        """The upload failed: free its slot now; its try and every byte it sent stay counted
        (a client that hangs up just before each MiB must not stream for free)."""
        with contextlib.suppress(QuotaExceeded):
            await self._count()
        await _redis(self.quotas.redis.zrem(self.inflight_key, self.ticket))

    async def withdrawn(self) -> None:
        """Refused after all: undo everything the admission took."""
        async with self.quotas.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.inflight_key, self.ticket)
            pipe.zrem(self.rate_key, self.ticket)
            await _redis(pipe.execute())


def _seconds_left_in_day(now: datetime) -> int:
    """Until the next UTC midnight, when the bytes-per-day quota starts over (at least 1)."""
    midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
    return max(1, math.ceil((midnight - now).total_seconds()))


async def _script(redis: Redis, script: str, names: list[str], *args: object) -> Any:
    """Run a Lua script on `names` (its KEYS) with `args` (its ARGV), within the deadline."""
    reply = redis.eval(script, len(names), *names, *map(str, args))
    return await _redis(cast(Awaitable[Any], reply))


async def _redis(awaitable: Awaitable[T]) -> T:
    """A Redis step of a quota, bounded like every other (503 either way: fail closed)."""
    with redis_errors():
        return await _bounded("redis", awaitable)


async def _bounded(service: str, awaitable: Awaitable[T]) -> T:
    """A quota step within DEPENDENCY_TIMEOUT_S, or ServiceUnavailable (503): fail closed."""
    try:
        return await asyncio.wait_for(awaitable, DEPENDENCY_TIMEOUT_S)
    except TimeoutError as exc:
        raise ServiceUnavailable(service, f"no answer within {DEPENDENCY_TIMEOUT_S:g} s") from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
