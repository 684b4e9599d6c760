"""What `pdfqueue migrate` does, shared with the demo and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

from pdfqueue.db import connect, migrate
from pdfqueue.settings import Settings
from pdfqueue.storage import Storage


@dataclass(frozen=True)
class Provisioned:
    migrations: list[str]
    """Migrations applied now (empty when the schema was up to date)."""
    storage: str
    bucket_created: bool


async def provision(settings: Settings) -> Provisioned:
    """Apply pending migrations and make sure the bucket (or folder) exists."""
    pool = await connect(settings.database_url, max_size=1)
    try:
        async with pool.acquire() as conn:
            applied = await migrate(conn)
    finally:
        await pool.close()
    storage = Storage.from_settings(settings, threads=1)
    try:
        created = await storage.ensure_bucket()
    finally:
        await storage.aclose()
    return Provisioned(applied, storage.backend.describe(), created)
