"""PostgreSQL: the host application's users table, read (the claim that links it is the files')."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from pdfqueue.stores.driver_errors import postgres_errors, typed_methods
from pdfqueue.stores.postgres.pool import UsersTable, quote_ident


@dataclass(frozen=True)
class UserRow:
    id: int
    email: str
    pdf_url: str | None


@typed_methods(postgres_errors)
@dataclass(frozen=True)
class UserStore:
    """Reads of the host application's table, scoped to a batch's tenant when it has the column."""

    pool: asyncpg.Pool
    table: UsersTable

    async def check_table(self) -> None:
        """Raise unless the host application's table has the columns pdfqueue reads."""
        tenant = f", {quote_ident(self.table.tenant_column)}" if self.table.tenant_column else ""
        await self.pool.execute(
            f"SELECT id, email, pdf_url{tenant} FROM {self.table.ident} LIMIT 0"
        )

    async def by_email(self, emails: Sequence[str], *, batch_id: str) -> dict[str, UserRow]:
        """Users whose lower-cased email is one of `emails` (index `lower(email)` for speed),
        among those `batch_id` may see (its tenant's, when the table has a tenant column)."""
        scoped = self.table.tenant_column is not None
        rows = await self.pool.fetch(
            f"SELECT id, lower(email) AS email, pdf_url FROM {self.table.ident}"
            f" WHERE lower(email) = ANY($1::text[]){self.table.scope('$2')}",
            list(emails),
            *([batch_id] if scoped else []),
        )
        return {r["email"]: UserRow(r["id"], r["email"], r["pdf_url"]) for r in rows}
