"""What `pdfqueue migrate` does, shared with the demo and the benchmarks."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pdfqueue.domain.errors import DependencyMisconfigured, StorageError, StorageRejected
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.db import connect, migrate
from pdfqueue.stores.storage import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Provisioned:
    migrations: list[str]
    """Migrations applied now (empty when the schema was up to date)."""
    storage: str
    bucket_created: bool
    uploads_expiry: str
    """`applied`, `off` (PDFQUEUE_UPLOADS_EXPIRE_DAYS=0), `unsupported` or `failed`."""


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
        expiry = await _expire_uploads(storage, settings.uploads_expire_days)
    finally:
        await storage.aclose()
    return Provisioned(applied, storage.backend.describe(), created, expiry)


async def _expire_uploads(storage: Storage, days: int) -> str:
    """Keep the uploads expiry rule; a store that cannot hold one only costs a warning, since
    the uploads then stay until a cleanup step removes them (see the README)."""
    if days == 0:
        return "off"
    where = storage.backend.describe()
    try:
        applied = await storage.expire_uploads(days)
    except (StorageError, StorageRejected, DependencyMisconfigured) as exc:  # no permission
        log.warning("uploads expiry rule not set on %s (%s): uploads/ is never cleaned", where, exc)
        return "failed"
    if not applied:
        log.warning(
            "%s has no lifecycle rules: uploads/ is never cleaned; remove uploads older than "
            "%d days with a cleanup step (README: Uploads expiry)",
            where,
            days,
        )
        return "unsupported"
    return "applied"
