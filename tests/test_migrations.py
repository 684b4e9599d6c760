"""Versioned migrations on a real PostgreSQL: versions, no-transaction runs, locks, and the
processes that refuse a schema too old for them without crashing."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from pdfqueue.domain.errors import DatabaseRejected, DatabaseUnavailable, SchemaNotReady
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime import connections as runtime
from pdfqueue.runtime.connections import OPERATOR, Role, Stores, worker_role
from pdfqueue.stores.postgres import schema
from pdfqueue.stores.postgres.schema import (
    MIGRATIONS_LOCK,
    Migration,
    bundled,
    code_version,
    migrate,
)

LATEST = code_version()
LISTING = 4  # 0004 builds the listing indexes, CONCURRENTLY


@pytest.fixture
async def fresh_dsn(settings: Settings) -> AsyncIterator[str]:
    """An empty database of its own, dropped afterwards."""
    name = f"pq_migrations_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(settings.database_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    yield urlunsplit(urlsplit(settings.database_url)._replace(path=f"/{name}"))
    await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    await admin.close()


@pytest.fixture
async def conn(fresh_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await schema.connect_for_migrations(fresh_dsn)
    yield connection
    await connection.close()


def _names(upto: int | None = None) -> list[str]:
    return [m.name for m in bundled() if upto is None or m.number <= upto]


async def _index(conn: asyncpg.Connection, name: str) -> tuple[bool, str] | None:
    row = await conn.fetchrow(
        "SELECT indisvalid, pg_get_indexdef(indexrelid) AS def FROM pg_index"
        " WHERE indexrelid = to_regclass($1)",
        name,
    )
    return None if row is None else (row["indisvalid"], row["def"])


async def _a_batch_with_files(conn: asyncpg.Connection, n: int = 2) -> str:
    batch = uuid.uuid4().hex
    await conn.execute(
        "INSERT INTO pdfqueue_batches (id, tenant, source_key, status)"
        " VALUES ($1, 'acme', 'uploads/x.zip', 'PROCESSING')",
        batch,
    )
    for idx in range(n):
        await conn.execute(
            "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome) VALUES ($1, $2, $3, 'linked')",
            batch,
            idx,
            f"f{idx}.pdf",
        )
    return batch


async def test_a_fresh_install_reaches_the_latest_version(conn: asyncpg.Connection) -> None:
    assert (await schema.read_version(conn)).version == 0
    assert await migrate(conn) == _names()
    found = await schema.read_version(conn)
    assert found.version == LATEST == max(m.number for m in bundled())
    await schema.require(conn)
    assert await migrate(conn) == []  # up to date: nothing again
    for name in (
        "pdfqueue_batches_by_tenant",
        "pdfqueue_files_by_outcome",
        "pdfqueue_files_by_name",
    ):
        index = await _index(conn, name)
        assert index is not None
        assert index[0], f"{name} is not valid"
    rows = await conn.fetch("SELECT version, number FROM pdfqueue_migrations ORDER BY number")
    assert [(r["version"], r["number"]) for r in rows] == [(m.name, m.number) for m in bundled()]


async def test_an_install_stopped_at_a_version_upgrades(conn: asyncpg.Connection) -> None:
    assert await migrate(conn, upto=3) == _names(3)
    batch = await _a_batch_with_files(conn)
    with pytest.raises(SchemaNotReady) as old:
        await schema.require(conn)
    assert str(old.value) == (
        f"schema version 3 is older than this release needs ({LATEST}): run pdfqueue migrate"
    )
    assert await migrate(conn) == _names()[3:]
    assert (await schema.read_version(conn)).version == LATEST
    assert (
        await conn.fetchval("SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1", batch) == 2
    )
    assert (
        await conn.fetchval("SELECT file_name FROM pdfqueue_batches WHERE id = $1", batch) is None
    )


async def test_an_install_by_the_previous_runner_upgrades(conn: asyncpg.Connection) -> None:
    """The runner before versions kept only names, and applied each file in one transaction."""
    await conn.execute(
        "CREATE TABLE pdfqueue_migrations"
        " (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in bundled()[:5]:
        sql = migration.sql.replace(" CONCURRENTLY", "")  # what it ran: plain CREATE INDEX
        async with conn.transaction():
            await conn.execute(sql.removeprefix(schema.NO_TRANSACTION))
            await conn.execute(
                "INSERT INTO pdfqueue_migrations (version) VALUES ($1)", migration.name
            )
    assert await schema.read_version(conn) == schema.SchemaVersion(5, 0)  # the old table, read
    assert await migrate(conn) == _names()[5:]
    assert (await schema.read_version(conn)).version == LATEST
    numbers = await conn.fetch("SELECT number FROM pdfqueue_migrations ORDER BY number")
    assert [r["number"] for r in numbers] == [m.number for m in bundled()]


async def test_a_no_transaction_migration_runs_outside_one(conn: asyncpg.Connection) -> None:
    concurrent = Migration.of(
        "0900_concurrent.sql",
        f"{schema.NO_TRANSACTION}\n-- an index built without blocking writes\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS t_by_source\n    ON pdfqueue_batches (source_key);\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS t_by_status ON pdfqueue_batches (status);\n",
    )
    assert not concurrent.transactional
    assert len(concurrent.statements()) == 2
    assert await migrate(conn, [*bundled(), concurrent]) == [*_names(), concurrent.name]
    for name in ("t_by_source", "t_by_status"):
        assert (await _index(conn, name) or (False, ""))[0]
    assert (await schema.read_version(conn)).version == 900

    # The same statement in a transaction is refused by PostgreSQL: the marker is what works.
    in_one = Migration.of(
        "0901_in_one.sql", "CREATE INDEX CONCURRENTLY t_x ON pdfqueue_batches (id);"
    )
    assert in_one.transactional
    with pytest.raises(DatabaseRejected):  # SQLSTATE 25001: a refusal, not an outage
        await migrate(conn, [in_one])
    assert (await schema.read_version(conn)).version == 900


async def test_a_migration_is_recorded_only_once_all_of_it_succeeded(
    conn: asyncpg.Connection,
) -> None:
    await migrate(conn)
    broken = Migration.of(
        "0900_half.sql",
        f"{schema.NO_TRANSACTION}\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS t_first ON pdfqueue_batches (source_key);\n"
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS t_second ON pdfqueue_batches (no_such_column);\n",
    )
    with pytest.raises(Exception, match="schema error"):
        await migrate(conn, [broken])
    assert (await schema.read_version(conn)).version == LATEST  # not recorded
    fixed = Migration.of("0900_half.sql", broken.sql.replace("no_such_column", "status"))
    assert await migrate(conn, [fixed]) == ["0900_half.sql"]  # runs again, whole
    assert (await schema.read_version(conn)).version == 900


async def test_an_interrupted_concurrent_index_is_built_again(conn: asyncpg.Connection) -> None:
    await migrate(conn, upto=3)
    await _a_batch_with_files(conn)
    # A CONCURRENTLY build that fails half way (here: not unique) leaves an INVALID index of
    # that name behind, as a killed `pdfqueue migrate` does.
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute(
            "CREATE UNIQUE INDEX CONCURRENTLY pdfqueue_files_by_name ON pdfqueue_files (batch_id)"
        )
    assert await _index(conn, "pdfqueue_files_by_name") == (
        False,
        "CREATE UNIQUE INDEX pdfqueue_files_by_name ON public.pdfqueue_files USING btree (batch_id)",
    )
    await migrate(conn)
    assert await _index(conn, "pdfqueue_files_by_name") == (
        True,
        "CREATE INDEX pdfqueue_files_by_name ON public.pdfqueue_files"
        " USING btree (batch_id, name, idx)",
    )


async def test_0004_builds_its_indexes_without_blocking_writes(
    conn: asyncpg.Connection, fresh_dsn: str
) -> None:
    """An open transaction that writes to pdfqueue_files makes the index build wait; a plain
    CREATE INDEX would then hold every other write behind it, CONCURRENTLY lets them through."""
    await migrate(conn, upto=LISTING - 1)
    batch = await _a_batch_with_files(conn, 1)
    writer = await asyncpg.connect(fresh_dsn)
    other = await asyncpg.connect(fresh_dsn)
    try:
        busy = writer.transaction()
        await busy.start()
        await writer.execute("LOCK TABLE pdfqueue_files IN ROW EXCLUSIVE MODE")
        running = asyncio.create_task(migrate(conn, upto=LISTING))
        await _until_an_index_build_waits(other, running)
        # lock_timeout: how long a write may be held up by a lock before it gives up
        await other.execute("SET lock_timeout = '2s'")
        await other.execute(
            "INSERT INTO pdfqueue_files (batch_id, idx, name, outcome)"
            " VALUES ($1, 7, 'during.pdf', 'linked')",
            batch,
        )
        await busy.commit()
        assert await asyncio.wait_for(running, 60) == [bundled()[LISTING - 1].name]
    finally:
        await writer.close()
        await other.close()
    assert (await schema.read_version(conn)).version == LISTING


async def test_a_migrate_killed_in_a_concurrent_build_is_finished_by_the_next(
    conn: asyncpg.Connection, fresh_dsn: str
) -> None:
    await migrate(conn, upto=LISTING - 1)
    writer = await asyncpg.connect(fresh_dsn)
    killed = await schema.connect_for_migrations(fresh_dsn)
    try:
        busy = writer.transaction()  # holds the build in its wait, as a long one would be
        await busy.start()
        await writer.execute("LOCK TABLE pdfqueue_files IN ROW EXCLUSIVE MODE")
        running = asyncio.create_task(migrate(killed, upto=LISTING))
        await _until_an_index_build_waits(conn, running)
        pid = killed.get_server_pid()
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(DatabaseUnavailable):
            await running
        await busy.rollback()
    finally:
        await writer.close()
        killed.terminate()
    assert (await schema.read_version(conn)).version == LISTING - 1  # not recorded
    left = await _index(conn, "pdfqueue_files_by_outcome")
    assert left is not None
    assert not left[0]  # INVALID: the build was interrupted
    assert await migrate(conn) == _names()[LISTING - 1 :]
    for name in ("pdfqueue_files_by_outcome", "pdfqueue_files_by_name"):
        assert (await _index(conn, name) or (False, ""))[0], name


async def _until_an_index_build_waits(
    conn: asyncpg.Connection, running: asyncio.Task[object]
) -> None:
    while not await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query ILIKE '%CREATE INDEX%pdfqueue_files%'"
    ):
        assert not running.done(), running
        await asyncio.sleep(0.05)


async def test_a_migrate_waits_for_the_one_running(
    conn: asyncpg.Connection, fresh_dsn: str
) -> None:
    holder = await asyncpg.connect(fresh_dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATIONS_LOCK)  # one is running
        waiting = asyncio.create_task(migrate(conn))
        await asyncio.sleep(schema.LOCK_POLL_S * 1.5)
        assert not waiting.done()
        assert (await schema.read_version(holder)).version == 0  # nothing done meanwhile
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATIONS_LOCK)
        assert await asyncio.wait_for(waiting, 60) == _names()
    finally:
        await holder.close()


async def test_two_concurrent_migrates_serialize(conn: asyncpg.Connection, fresh_dsn: str) -> None:
    second = await schema.connect_for_migrations(fresh_dsn)
    try:
        results = await asyncio.gather(migrate(conn), migrate(second))
    finally:
        await second.close()
    assert sorted(results, key=len) == [[], _names()]
    assert (await schema.read_version(conn)).version == LATEST


async def test_a_newer_schema_is_compatible_unless_it_says_otherwise(
    conn: asyncpg.Connection,
) -> None:
    additive = Migration.of("0900_more.sql", "ALTER TABLE pdfqueue_batches ADD COLUMN t_x int;")
    await migrate(conn, [*bundled(), additive])
    await schema.require(conn)  # this code, on a newer schema that only added
    breaking = Migration.of(
        "0901_contract.sql",
        "-- pdfqueue:min-compatible 901\nALTER TABLE pdfqueue_batches DROP COLUMN t_x;",
    )
    assert breaking.min_compatible == 901
    await migrate(conn, [breaking])
    with pytest.raises(SchemaNotReady) as refused:
        await schema.require(conn)
    assert str(refused.value) == (
        f"schema version 901 needs code of version 901 or later, and this release is {LATEST}:"
        " upgrade pdfqueue"
    )
    await schema.require(conn, needed=901)


def test_0004_is_marked_and_concurrent() -> None:
    listing = bundled()[LISTING - 1]
    assert not listing.transactional
    creates = [s for s in listing.statements() if s.startswith("CREATE")]
    assert len(creates) == 3
    assert all("CONCURRENTLY IF NOT EXISTS" in s for s in creates)
    assert (
        resources.files("pdfqueue.stores.postgres").joinpath("migrations", listing.name).is_file()
    )


async def test_the_api_is_not_ready_on_an_old_schema_and_is_once_migrated(
    settings: Settings, conn: asyncpg.Connection, fresh_dsn: str
) -> None:
    import httpx

    from pdfqueue_api.app import create_app

    await migrate(conn, upto=LATEST - 1)
    app = create_app(settings.model_copy(update={"database_url": fresh_dsn}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://pdfqueue.test"
        ) as client:
            answer = await client.get("/readyz")
            assert answer.status_code == 503
            assert answer.json() == {
                "redis": "ok",
                "postgresql": "ok",
                "storage": "ok",
                "schema": f"schema version {LATEST - 1} is older than this release needs"
                f" ({LATEST}): run pdfqueue migrate",
            }
            await migrate(conn)
            answer = await client.get("/readyz")  # the same process: no restart
            assert answer.status_code == 200
            assert answer.json()["schema"] == "ok"


@pytest.mark.parametrize("role_name", ["worker", "operator"])
async def test_workers_and_the_operator_wait_for_the_schema(
    settings: Settings,
    conn: asyncpg.Connection,
    fresh_dsn: str,
    role_name: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime, "SCHEMA_RETRY_MAX_S", 0.5)
    caplog.set_level(logging.WARNING, logger="pdfqueue.runtime.connections")
    await migrate(conn, upto=LATEST - 1)
    late = settings.model_copy(update={"database_url": fresh_dsn})
    role: Role = worker_role(late) if role_name == "worker" else OPERATOR
    opening = asyncio.create_task(Stores.open(late, role))
    needed = f"schema version {LATEST - 1} is older than this release needs ({LATEST})"
    while needed not in caplog.text:
        assert not opening.done(), opening
        await asyncio.sleep(0.05)
    assert f"{role_name}: waiting for the schema: {needed}: run pdfqueue migrate" in caplog.text
    assert not opening.done()
    await migrate(conn)
    stores = await asyncio.wait_for(opening, 30)
    await stores.close()


async def test_pdfqueue_migrate_reports_the_version_it_left(
    settings: Settings, fresh_dsn: str
) -> None:
    from pdfqueue.runtime.provision import provision

    done = await provision(settings.model_copy(update={"database_url": fresh_dsn}))
    assert done.migrations == _names()
    assert done.schema == schema.SchemaVersion(LATEST, 0)
    again = await provision(settings.model_copy(update={"database_url": fresh_dsn}))
    assert again.migrations == []
