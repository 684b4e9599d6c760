"""Versioned migrations: the schema version table, the runner, and the check each process makes.

A migration is `NNNN_name.sql` in the `migrations` folder; its number is its version, and the
schema's version is the highest number applied. A migration whose first line is exactly
`-- pdfqueue:no-transaction` runs statement by statement outside a transaction (for
`CREATE INDEX CONCURRENTLY`, which never blocks writes); each of its statements must be safe to
run again (`IF NOT EXISTS`), since an interrupted run starts it over. Every other migration runs
in one transaction with its own record.

Compatibility: code needs the schema of the highest migration bundled with it (`code_version`),
and runs against any newer schema too, since migrations only add (expand, never contract). A
migration that breaks older code says so with a line `-- pdfqueue:min-compatible N`: code that
needs less than N then refuses that schema.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import asyncpg

from pdfqueue.domain.errors import SchemaNotReady
from pdfqueue.stores.driver_errors import postgres_errors, typed_call

NO_TRANSACTION = "-- pdfqueue:no-transaction"
MIGRATIONS_LOCK = 0x70646671  # "pdfq": serializes concurrent `pdfqueue migrate` runs
LOCK_POLL_S = 2.0
_MIN_COMPATIBLE = re.compile(r"^-- pdfqueue:min-compatible (\d+)\s*$", re.MULTILINE)
_NAME = re.compile(r"^(\d+)_[\w-]+\.sql$")
_CONCURRENT_INDEX = re.compile(
    r"^\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?([\w.\"]+)",
    re.IGNORECASE,
)
# The table `pdfqueue migrate` has kept since its first release (one row per file, by name),
# grown by the columns of versions: the old rows keep working, their number read from the name.
_TABLE = """
CREATE TABLE IF NOT EXISTS pdfqueue_migrations
    (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
ALTER TABLE pdfqueue_migrations ADD COLUMN IF NOT EXISTS number integer;
ALTER TABLE pdfqueue_migrations ADD COLUMN IF NOT EXISTS min_compatible integer NOT NULL DEFAULT 0;
UPDATE pdfqueue_migrations SET number = substring(version from '^[0-9]+')::integer
    WHERE number IS NULL;
"""
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    """One bundled `NNNN_name.sql`."""

    number: int
    name: str
    sql: str

    @classmethod
    def of(cls, name: str, sql: str) -> Migration:
        match = _NAME.match(name)
        if match is None:
            msg = f"migration file {name!r} is not named NNNN_name.sql"
            raise ValueError(msg)
        return cls(int(match[1]), name, sql)

    @property
    def transactional(self) -> bool:
        return self.sql.split("\n", 1)[0].rstrip() != NO_TRANSACTION

    @property
    def min_compatible(self) -> int:
        """The lowest code version that still works once this migration is applied (0: any)."""
        found = _MIN_COMPATIBLE.findall(self.sql)
        return max((int(n) for n in found), default=0)

    def statements(self) -> list[str]:
        """The statements of a no-transaction migration: full-line `--` comments dropped, split
        at each `;` that ends a line (such a migration holds plain DDL, no function bodies)."""
        lines = [ln for ln in self.sql.splitlines() if not ln.lstrip().startswith("--")]
        parts = re.split(r";[ \t]*(?:\n|$)", "\n".join(lines))
        return [p.strip() for p in parts if p.strip()]


@cache
def bundled() -> tuple[Migration, ...]:
    """The migrations shipped in this package, in order (numbers unique)."""
    folder = resources.files("pdfqueue.stores.postgres").joinpath("migrations")
    found = sorted(
        (Migration.of(p.name, p.read_text()) for p in folder.iterdir() if p.name.endswith(".sql")),
        key=lambda m: m.number,
    )
    numbers = [m.number for m in found]
    if len(set(numbers)) != len(numbers):
        msg = f"two migrations share a number: {[m.name for m in found]}"
        raise ValueError(msg)
    return tuple(found)


def code_version() -> int:
    """The schema this code needs: the highest migration bundled with it."""
    return bundled()[-1].number


@dataclass(frozen=True)
class SchemaVersion:
    """What the database's `pdfqueue_migrations` says."""

    version: int
    """The highest migration applied (0: none, or no table)."""
    min_compatible: int
    """The lowest code version the applied migrations still work with."""

    def problem(self, needed: int) -> SchemaNotReady | None:
        """Why code needing schema `needed` cannot run on this one, or None."""
        if self.version < needed:
            return SchemaNotReady(
                f"schema version {self.version} is older than this release needs ({needed}):"
                " run pdfqueue migrate",
                found=self.version,
                needed=needed,
            )
        if self.min_compatible > needed:
            return SchemaNotReady(
                f"schema version {self.version} needs code of version {self.min_compatible}"
                f" or later, and this release is {needed}: upgrade pdfqueue",
                found=self.version,
                needed=needed,
            )
        return None


@typed_call(postgres_errors)
async def connect_for_migrations(dsn: str) -> asyncpg.Connection:
    """One connection without a time limit per statement: a concurrent index build on a large
    table takes as long as it takes (the pools' command_timeout would cut it off)."""
    conn: asyncpg.Connection = await asyncpg.connect(
        dsn, timeout=5, command_timeout=None, server_settings={"statement_timeout": "0"}
    )
    return conn


@typed_call(postgres_errors)
async def read_version(conn: asyncpg.Connection | asyncpg.Pool) -> SchemaVersion:
    """The database's schema version; any shape of the table since its first release."""
    try:
        # to_jsonb: the row's columns whatever they are (min_compatible came later)
        rows = await conn.fetch(
            "SELECT version, to_jsonb(m) ->> 'min_compatible' AS min_compatible"
            " FROM pdfqueue_migrations m"
        )
    except asyncpg.UndefinedTableError:
        return SchemaVersion(0, 0)
    numbers = [int(m[1]) for r in rows if (m := _NAME.match(r["version"]))]
    floors = [int(r["min_compatible"] or 0) for r in rows]
    return SchemaVersion(max(numbers, default=0), max(floors, default=0))


async def require(conn: asyncpg.Connection | asyncpg.Pool, needed: int | None = None) -> None:
    """Raise SchemaNotReady unless this code (or code needing `needed`) can run on the schema."""
    problem = (await read_version(conn)).problem(code_version() if needed is None else needed)
    if problem is not None:
        raise problem


@typed_call(postgres_errors)
async def migrate(
    conn: asyncpg.Connection,
    migrations: Sequence[Migration] | None = None,
    *,
    upto: int | None = None,
) -> list[str]:
    """Apply the migrations not yet recorded (the bundled ones, up to `upto`), in order;
    returns the names applied. Concurrent runs wait for each other (an advisory lock)."""
    chosen = [m for m in migrations or bundled() if upto is None or m.number <= upto]
    await _lock(conn)
    try:
        async with conn.transaction():
            await conn.execute(_TABLE)
        done = {r["version"] for r in await conn.fetch("SELECT version FROM pdfqueue_migrations")}
        applied: list[str] = []
        for migration in chosen:
            if migration.name in done:
                continue
            log.info("applying migration %s", migration.name)
            if migration.transactional:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await _record(conn, migration)
            else:
                for statement in migration.statements():
                    await _drop_invalid_index(conn, statement)
                    await conn.execute(statement)
                await _record(conn, migration)  # only once every statement has succeeded
            applied.append(migration.name)
        return applied
    finally:
        if not conn.is_closed():  # a lost connection has released its lock already
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATIONS_LOCK)


async def _lock(conn: asyncpg.Connection) -> None:
    """Take the session's migration lock, saying so while another run holds it."""
    while not await conn.fetchval("SELECT pg_try_advisory_lock($1)", MIGRATIONS_LOCK):
        log.info("another pdfqueue migrate is running: waiting for it")
        await asyncio.sleep(LOCK_POLL_S)


async def _record(conn: asyncpg.Connection, migration: Migration) -> None:
    await conn.execute(
        "INSERT INTO pdfqueue_migrations (version, number, min_compatible) VALUES ($1, $2, $3)",
        migration.name,
        migration.number,
        migration.min_compatible,
    )


async def _drop_invalid_index(conn: asyncpg.Connection, statement: str) -> None:
    """An interrupted CREATE INDEX CONCURRENTLY leaves an INVALID index of that name, which
    `IF NOT EXISTS` would keep for ever: drop it so that the statement builds it again. Under
    the migration lock no other build of it can be running."""
    match = _CONCURRENT_INDEX.match(statement)
    if match is None:
        return
    name = match[1]
    invalid = await conn.fetchval(
        "SELECT NOT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", name
    )
    if invalid:
        log.warning("index %s is INVALID (an interrupted build): building it again", name)
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
