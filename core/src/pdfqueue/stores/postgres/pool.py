"""PostgreSQL: the pool, and the host application's users table as the stores name and scope it."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from pdfqueue.stores.driver_errors import postgres_errors, typed_call


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
class UsersTable:
    """The host application's table, and the column that scopes it by tenant (if any).

    With `tenant_column` set, every query of the table also requires the column to equal
    the tenant of the batch being processed, read from the batch's own row in the same
    statement: a batch can neither see nor link another tenant's users.
    """

    name: str
    tenant_column: str | None = None

    @property
    def ident(self) -> str:
        """The table's name, quoted for SQL."""
        return quote_ident(self.name)

    def scope(self, batch_param: str) -> str:
        """SQL restricting the table to the tenant of the batch in `batch_param`."""
        if self.tenant_column is None:
            return ""
        return (
            f" AND {quote_ident(self.tenant_column)} ="
            f" (SELECT tenant FROM pdfqueue_batches WHERE id = {batch_param})"
        )
