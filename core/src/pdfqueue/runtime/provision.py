"""What `pdfqueue migrate` does, shared with the demo and the benchmarks."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg

from pdfqueue.domain.errors import (
    DatabaseUnavailable,
    DependencyMisconfigured,
    StorageError,
    StorageRejected,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.waiting import until_ready
from pdfqueue.stores.postgres.schema import (
    SchemaVersion,
    connect_for_migrations,
    migrate,
    read_version,
)
from pdfqueue.stores.storage import Storage

log = logging.getLogger(__name__)
MIGRATE_WAIT_S = 120.0
"""How long `pdfqueue migrate` waits for PostgreSQL to answer (a new database still starting)."""


@dataclass(frozen=True)
class Provisioned:
    migrations: list[str]
    """Migrations applied now (empty when the schema was up to date)."""
    schema: SchemaVersion
    """The schema's version once they are."""
    storage: str
    bucket_created: bool
    uploads_expiry: str
    """`applied`, `off` (PDFQUEUE_UPLOADS_EXPIRE_DAYS=0), `unsupported` or `failed`."""


async def provision(settings: Settings) -> Provisioned:
    """Apply pending migrations and make sure the bucket (or folder) exists."""
    conn = await _connect_when_up(settings.database_url)
    try:
        applied = await migrate(conn)
        schema = await read_version(conn)
    finally:
        await conn.close()
    storage = Storage.from_settings(settings, threads=1)
    try:
        created = await storage.ensure_bucket()
        expiry = await _expire_uploads(storage, settings.uploads_expire_days)
    finally:
        await storage.aclose()
    return Provisioned(applied, schema, storage.backend.describe(), created, expiry)


async def _connect_when_up(dsn: str) -> asyncpg.Connection:
    """The migration's connection, once PostgreSQL answers: a Job started beside a new
    database waits for it rather than failing its first tries."""
    return await until_ready(
        "migrate: waiting for PostgreSQL",
        lambda: connect_for_migrations(dsn),
        errors=(DatabaseUnavailable,),
        timeout_s=MIGRATE_WAIT_S,
        max_delay_s=5.0,
    )


async def _expire_uploads(storage: Storage, days: int) -> str:
    """Keep the uploads expiry rule; a store that cannot hold one only costs a warning, since
    the uploads then stay until a cleanup step removes them (docs/operations/data-retention.md)."""
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
            "%d days with a cleanup step (docs/operations/data-retention.md)",
            where,
            days,
        )
        return "unsupported"
    return "applied"
