"""What every task needs, built once per worker process and kept in arq's ctx."""

from __future__ import annotations

import random
from dataclasses import dataclass

import asyncpg
from redis.asyncio import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.users import UserStore
from pdfqueue.stores.storage import Storage
from pdfqueue_worker.archive import Limits
from pdfqueue_worker.extractor import Extractor


@dataclass
class Deps:
    settings: Settings
    redis: Redis
    lifecycle: Lifecycle
    pool: asyncpg.Pool
    batches: BatchStore
    files: FileStore
    users: UserStore
    storage: Storage
    extractor: Extractor

    @property
    def limits(self) -> Limits:
        s = self.settings
        return Limits(
            max_members=s.max_members,
            max_member_bytes=s.max_pdf_bytes,
            max_total_bytes=s.max_total_uncompressed_bytes,
            max_ratio=s.max_compression_ratio,
            max_directory_bytes=s.max_directory_bytes,
        )

    def backoff_s(self, job_try: int) -> float:
        """Exponential backoff with "equal jitter": spread out, yet never near zero.

        Full jitter could retry almost at once and burn every try inside a short outage;
        half of each delay is fixed, so the tries always span at least half the schedule.
        """
        s = self.settings
        ceiling = min(s.retry_max_delay_s, s.retry_base_delay_s * 2.0 ** (job_try - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 (not crypto)
