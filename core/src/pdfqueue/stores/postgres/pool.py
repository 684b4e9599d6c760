"""PostgreSQL: the pool, and the host application's users table as the stores name and scope it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import asyncpg

from pdfqueue.domain.links import UserLinks
from pdfqueue.domain.models import UserId
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.driver_errors import postgres_errors, typed_call

IdType = Literal["integer", "uuid", "text"]


def quote_ident(name: str) -> str:
    """Quote a validated `[schema.]table` name (see Settings.users_table)."""
    return ".".join(f'"{part}"' for part in name.split("."))


@typed_call(postgres_errors)
async def connect(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=5,
        command_timeout=15,
        reset=_keep_session,
    )
    return pool


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to reset when a connection goes back to the pool.

    asyncpg's default runs `SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`,
    one more round trip after every pooled query. pdfqueue never changes session state (no
    SET, LISTEN, cursors or session-level locks), and asyncpg still rolls back a
    transaction left open before calling this.
    """


@typed_call(postgres_errors)
async def ping(pool: asyncpg.Pool) -> None:
    """Raise DatabaseUnavailable unless PostgreSQL answers."""
    await pool.fetchval("SELECT 1")


@dataclass(frozen=True)
class ConnectionUse:
    """Client connections open on the server, of those a non-superuser may open."""

    used: int
    limit: int

    @property
    def share(self) -> float:
        return self.used / self.limit if self.limit > 0 else 1.0


async def connection_use(pool: asyncpg.Pool) -> ConnectionUse:
    """How many of the server's connections are taken, every client's counted (pdfqueue's
    pools and the host application's): max_connections less those reserved for superusers
    (and, from PostgreSQL 16, for `pg_use_reserved_connections`)."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        " AS used, current_setting('max_connections')::int"
        " - current_setting('superuser_reserved_connections')::int"
        " - coalesce(current_setting('reserved_connections', true)::int, 0) AS limit"
    )
    return ConnectionUse(int(row["used"]), int(row["limit"]))


@dataclass(frozen=True)
class UsersTable:
    """The host application's table as configured (users settings): its columns, the type
    of its id, the links it holds, and the column that scopes it by tenant (if any).

    With `tenant_column` set, every query of the table also requires the column to equal
    the tenant of the batch being processed, read from the batch's own row in the same
    statement: a batch can neither see nor link another tenant's users.

    pdfqueue's own rows name a user in `pdfqueue_files.user_id` (bigint) when the ids are
    integers, and in `user_ref` (text) otherwise (0012): integer ids keep the column and
    the index they have always had, and a report shows each id as the table holds it.
    """

    name: str
    tenant_column: str | None = None
    id_column: str = "id"
    id_type: IdType = "integer"
    email_column: str = "email"
    link_column: str = "pdf_url"
    links: UserLinks = field(default_factory=UserLinks)

    @classmethod
    def of(cls, settings: Settings, *, scoped: bool = False) -> UsersTable:
        """The table `settings` names; scoped by tenant when `scoped` and a column is set."""
        return cls(
            settings.users_table,
            settings.users_tenant_column if scoped else None,
            settings.users_id_column,
            settings.users_id_type,
            settings.users_email_column,
            settings.users_link_column,
            UserLinks.of(settings.users_link_template, settings.storage_url),
        )

    @property
    def ident(self) -> str:
        """The table's name, quoted for SQL."""
        return quote_ident(self.name)

    @property
    def id(self) -> str:
        return quote_ident(self.id_column)

    @property
    def email(self) -> str:
        return quote_ident(self.email_column)

    @property
    def link(self) -> str:
        return quote_ident(self.link_column)

    @property
    def files_column(self) -> str:
        """The column of `pdfqueue_files` that names a user of this table."""
        return "user_id" if self.id_type == "integer" else "user_ref"

    @property
    def files_type(self) -> str:
        """The SQL type of `files_column`, as ids are passed to it (`$n::<type>[]`)."""
        return "bigint" if self.id_type == "integer" else "text"

    def as_id(self, expr: str) -> str:
        """`expr` (an id as `files_type`) as the id column's type, for comparing with it (a
        cast on the parameter's side keeps the table's index usable)."""
        return f"({expr})::uuid" if self.id_type == "uuid" else expr

    def user_id(self, value: object) -> UserId:
        """An id as asyncpg read it from the table (an int, a UUID, a str), as pdfqueue
        keeps it: an int, or text."""
        return value if isinstance(value, int) else str(value)

    def scope(self, batch_param: str) -> str:
        """SQL restricting the table to the tenant of the batch in `batch_param`."""
        if self.tenant_column is None:
            return ""
        return (
            f" AND {quote_ident(self.tenant_column)} ="
            f" (SELECT tenant FROM pdfqueue_batches WHERE id = {batch_param})"
        )
