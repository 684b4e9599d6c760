"""PostgreSQL: the host application's users table, read (the claim that links it is the files')."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from pdfqueue.domain.errors import DatabaseSchemaError, UsersTableMisfit
from pdfqueue.domain.models import UserId
from pdfqueue.stores.driver_errors import postgres_errors, typed_methods
from pdfqueue.stores.postgres.pool import UsersTable, quote_ident

ID_TYPES = ("integer", "uuid", "text")


@dataclass(frozen=True)
class ColumnType:
    name: str
    category: str


"""A column's type as pg_type names it, and its category (`S`: a string type)."""


def fits(id_type: str, column: ColumnType) -> bool:
    """Whether a column of that type holds ids of PDFQUEUE_USERS_ID_TYPE `id_type`: integer
    (smallint, integer, bigint), uuid, or text (any string type: text, varchar, citext)."""
    if id_type == "integer":
        return column.name in ("int2", "int4", "int8")
    if id_type == "uuid":
        return column.name == "uuid"
    return column.category == "S"


_COLUMNS = """
SELECT a.attname AS name, t.typname::text AS type, t.typcategory::text AS category
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
"""
_INDEXES = "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = to_regclass($1)"


@dataclass(frozen=True)
class UserRow:
    id: UserId
    email: str
    link: str | None
    """The link column's value: NULL (not linked yet), or whatever it holds."""
    linked_key: str | None = None
    """The object key `link` names, when pdfqueue's link template made it."""


@typed_methods(postgres_errors)
@dataclass(frozen=True)
class UserStore:
    """Reads of the host application's table, scoped to a batch's tenant when it has the column."""

    pool: asyncpg.Pool
    table: UsersTable

    async def check_table(self) -> list[str]:
        """Check the live table against the users settings: raise DatabaseSchemaError if it
        or a column is missing, UsersTableMisfit if a column is of a type pdfqueue cannot
        use as configured; return warnings (a match that would scan the table)."""
        t = self.table
        rows = await self.pool.fetch(_COLUMNS, t.ident)
        found = {r["name"]: ColumnType(r["type"], r["category"]) for r in rows}
        if not found:
            msg = f"PDFQUEUE_USERS_TABLE {t.name!r} does not exist (or cannot be seen)"
            raise DatabaseSchemaError(msg)
        texts = {"EMAIL": t.email_column, "LINK": t.link_column}
        if t.tenant_column:
            texts["TENANT"] = t.tenant_column
        wanted = {"ID": t.id_column, **texts}
        if missing := [
            f"{c} (PDFQUEUE_USERS_{s}_COLUMN)" for s, c in wanted.items() if c not in found
        ]:
            msg = f"{t.name} has no column {', '.join(missing)}"
            raise DatabaseSchemaError(msg)
        id_type = found[t.id_column]
        if not fits(t.id_type, id_type):
            fitting = [k for k in ID_TYPES if fits(k, id_type)]
            fix = f"set PDFQUEUE_USERS_ID_TYPE={fitting[0]}" if fitting else "it cannot hold ids"
            msg = (
                f"{t.name}.{t.id_column} is of type {id_type.name}, and PDFQUEUE_USERS_ID_TYPE"
                f" is {t.id_type}: {fix}"
            )
            raise UsersTableMisfit(msg)
        for setting, column in texts.items():
            if found[column].category != "S":
                msg = (
                    f"{t.name}.{column} (PDFQUEUE_USERS_{setting}_COLUMN) is of type"
                    f" {found[column].name}, not text"
                )
                raise UsersTableMisfit(msg)
        indexes = [r[0] for r in await self.pool.fetch(_INDEXES, t.ident)]
        return [] if any(_matches_by_email(d, t) for d in indexes) else [_index_advice(t)]

    async def by_email(self, emails: Sequence[str], *, batch_id: str) -> dict[str, UserRow]:
        """Users whose lower-cased email is one of `emails` (index `lower(email)` for speed),
        among those `batch_id` may see (its tenant's, when the table has a tenant column)."""
        t = self.table
        scoped = t.tenant_column is not None
        rows = await self.pool.fetch(
            f"SELECT {t.id} AS id, lower({t.email}) AS email, {t.link} AS link FROM {t.ident}"
            f" WHERE lower({t.email}) = ANY($1::text[]){t.scope('$2')}",
            list(emails),
            *([batch_id] if scoped else []),
        )
        return {r["email"]: self._row(r) for r in rows}

    def _row(self, r: asyncpg.Record) -> UserRow:
        link = r["link"]
        key = None if link is None else self.table.links.key(link)
        return UserRow(self.table.user_id(r["id"]), r["email"], link, key)


def _matches_by_email(definition: str, table: UsersTable) -> bool:
    """Whether an index (as pg_get_indexdef writes it) serves the match: its keys begin with
    `lower(email)`, or with the tenant column and then that, when the table is scoped."""
    if " WHERE " in definition:  # a partial index serves only its own rows
        return False
    keys = definition.partition(" USING ")[2].partition("(")[2]
    col = re.escape(table.email_column)
    lower = rf'lower\(\(?"?{col}"?\)?(?:::text)?\)'
    if table.tenant_column:
        tenant = re.escape(table.tenant_column)
        if re.match(rf'"?{tenant}"?, {lower}', keys):
            return True
    return re.match(lower, keys) is not None


def _index_advice(table: UsersTable) -> str:
    """The warning for a table without an index for the match, with the statement to run."""
    keys = f"lower({table.email})"
    if table.tenant_column:
        keys = f"{quote_ident(table.tenant_column)}, {keys}"
    name = quote_ident(f"{table.name.rpartition('.')[2]}_{table.email_column}_lower")
    return (
        f"{table.name} has no index on lower({table.email_column}): every PDF's match reads"
        f" the whole table. Create one: CREATE INDEX CONCURRENTLY {name} ON {table.ident}"
        f" ({keys})"
    )
