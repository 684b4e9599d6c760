"""The composition root: the stores a process role opens at start and closes at stop.

The API, the worker and the operator each ask for their role's `Stores` instead of building
Redis, PostgreSQL, storage and the lifecycle by hand; only the sizes differ per role.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import asyncpg
from redis.asyncio import Redis

from pdfqueue.domain.errors import DatabaseSchemaError, DatabaseUnavailable, SchemaNotReady
from pdfqueue.domain.settings import API_POOL_CONNECTIONS, Settings
from pdfqueue.erasure import Eraser
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.runtime.waiting import until_ready
from pdfqueue.stores.postgres import schema
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.files import FileStore
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.retention import RetentionStore
from pdfqueue.stores.postgres.users import UserStore
from pdfqueue.stores.redis.client import open_redis
from pdfqueue.stores.storage import Storage


@dataclass(frozen=True)
class Role:
    """What a kind of process needs from its stores."""

    name: str
    pool_min: int
    pool_max: int
    storage_threads: int
    redis_connect_timeout_s: float | None = None
    redis_timeout_s: float | None = None
    """Producers fail fast (an HTTP handler must never hang on a dead Redis)."""
    scoped_users: bool = False
    """Queries of the users table are scoped by PDFQUEUE_USERS_TENANT_COLUMN (the worker's)."""
    waits_for_schema: bool = True
    """Opening waits until the schema is one this code runs on; the API opens at once and its
    /readyz says why it is not ready instead."""
    by_hand: bool = False
    """A command a person runs and waits for: PostgreSQL down, or a schema this code does not
    run on, is an error at once (the schema checked once), where a process waits for them."""


API = Role(
    "api",
    0,
    API_POOL_CONNECTIONS,
    16,
    redis_connect_timeout_s=1,
    redis_timeout_s=2,
    waits_for_schema=False,
)
OPERATOR = Role("operator", 1, 4, 4, redis_connect_timeout_s=2, redis_timeout_s=5)
ADMIN = Role("admin", 0, 4, 8, redis_connect_timeout_s=2, redis_timeout_s=5, by_hand=True)
"""An administrator's command (`pdfqueue purge`, `erase --email`, `admin ...`): database
access, no token."""
log = logging.getLogger(__name__)
STARTUP_WAIT_S = 60.0
"""How long a process started beside its database (a pod beside PostgreSQL's, both new) waits
for it to answer before it gives up: waiting, not a crash loop, is what the probes expect."""
SCHEMA_RETRY_MAX_S = 10.0
"""The longest pause between two looks at the schema version while a process waits for it."""
WORKER_STORAGE_CONNECTIONS = 16
"""Concurrent S3 requests per worker: a job stores its PDFs at once, up to 16 by default."""


def worker_role(settings: Settings) -> Role:
    """A job claims its PDFs concurrently: connections and S3 requests scale with it."""
    return Role("worker", 1, settings.max_jobs + 4, WORKER_STORAGE_CONNECTIONS, scoped_users=True)


@dataclass(frozen=True)
class Stores:
    """Redis, PostgreSQL (its pool and a store per aggregate over it), storage and the batch
    lifecycle over them, for one process."""

    settings: Settings
    redis: Redis
    pool: asyncpg.Pool
    batches: BatchStore
    files: FileStore
    users: UserStore
    storage: Storage
    lifecycle: Lifecycle
    owns_redis: bool

    @classmethod
    async def open(cls, settings: Settings, role: Role, redis: Redis | None = None) -> Stores:
        """Open the role's stores; `redis` is one the caller owns (arq's, in the worker). If a
        step fails (PostgreSQL never up, the schema wait cancelled, a storage URL of no known
        scheme), what this opened is closed before the error propagates."""
        own = redis is None
        if redis is None:
            redis = open_redis(
                settings,
                connect_timeout_s=role.redis_connect_timeout_s,
                timeout_s=role.redis_timeout_s,
            )
        opened = AsyncExitStack()
        if own:
            opened.push_async_callback(redis.aclose)
        try:
            pool = await _connect(settings.database_url, role)
            opened.push_async_callback(pool.close)
            if role.by_hand:
                await schema.require(pool)
            elif role.waits_for_schema:
                await _schema_when_ready(pool, role)
            storage = Storage.from_settings(settings, threads=role.storage_threads)
        except BaseException:  # BaseException: cancelled while it waited, when stopping
            await opened.aclose()
            raise
        opened.pop_all()  # from now on `close` closes them
        table = UsersTable.of(settings, scoped=role.scoped_users)
        batches, files = BatchStore(pool), FileStore(pool, table)
        lifecycle = Lifecycle.of(batches, files, redis, settings)
        users = UserStore(pool, table)
        return cls(settings, redis, pool, batches, files, users, storage, lifecycle, own)

    @classmethod
    @asynccontextmanager
    async def opened(cls, settings: Settings, role: Role) -> AsyncIterator[Stores]:
        """The role's stores for the block, closed after it (a command's whole run)."""
        stores = await cls.open(settings, role)
        try:
            yield stores
        finally:
            await stores.close()

    def eraser(self) -> Eraser:
        """Retention and erasure over these stores."""
        retention = RetentionStore.of(self.pool, self.settings)
        return Eraser(retention, self.lifecycle, self.storage, self.settings)

    async def close(self) -> None:
        await self.storage.aclose()
        await self.pool.close()
        if self.owns_redis:
            await self.redis.aclose()


def lifecycle_over(pool: asyncpg.Pool, redis: Redis, settings: Settings) -> Lifecycle:
    """The lifecycle over stores of its own on `pool`, outside a role's `Stores` (an
    administrator's command, a test, a benchmark): the users table unscoped."""
    files = FileStore(pool, UsersTable.of(settings))
    return Lifecycle.of(BatchStore(pool), files, redis, settings)


async def _connect(dsn: str, role: Role) -> asyncpg.Pool:
    """The role's pool: at once for a command run by hand, else once PostgreSQL is up."""
    if role.by_hand:
        return await connect(dsn, min_size=role.pool_min, max_size=role.pool_max)
    return await _connect_when_up(dsn, role)


async def _connect_when_up(dsn: str, role: Role) -> asyncpg.Pool:
    """The role's pool, once PostgreSQL answers (for at most STARTUP_WAIT_S)."""
    return await until_ready(
        f"{role.name}: waiting for PostgreSQL",
        lambda: connect(dsn, min_size=role.pool_min, max_size=role.pool_max),
        errors=(DatabaseUnavailable,),
        timeout_s=STARTUP_WAIT_S,
        max_delay_s=5.0,
    )


async def _schema_when_ready(pool: asyncpg.Pool, role: Role) -> None:
    """Wait, saying why, until the schema is one this code runs on (`pdfqueue migrate` has
    run): no crash loop, and no work done against tables this code does not know."""
    await until_ready(
        f"{role.name}: waiting for the schema",
        lambda: schema.require(pool),
        errors=(SchemaNotReady, DatabaseSchemaError, DatabaseUnavailable),
        timeout_s=None,
        max_delay_s=SCHEMA_RETRY_MAX_S,
    )
