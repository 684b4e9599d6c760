"""The host application's users table: its name, its columns, its id type, how a link reads."""

from __future__ import annotations

import re
from string import Formatter
from typing import Literal

from pydantic import BaseModel, ValidationInfo, field_validator

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LINK_FIELDS = frozenset({"key", "bucket", "prefix"})
"""What a link template may name: the object's key (once, required), and the bucket and the
prefix of `storage_url` (`s3://bucket/prefix`)."""


class UsersSettings(BaseModel):
    """The users table: pdfqueue reads your application's table, it never creates it.

    A user is found by the lower-cased address in the email column and linked by writing the
    stored PDF's key (or a URL made from it) into the link column, only while that column is
    NULL. The names, the id column's type and the link's form are yours; at start the worker
    checks them against the live table and says what does not fit.
    """

    users_table: str = "users"
    """The host application's table, `[schema.]table`."""
    users_id_column: str = "id"
    """The column that identifies a user: what the report's `user_id` shows and what the
    stored PDF's key is made from."""
    users_id_type: Literal["integer", "uuid", "text"] = "integer"
    """The id column's type: `integer` (smallint, integer, bigint), `uuid`, or `text`
    (text, varchar). The worker refuses to link while the live column is of another type."""
    users_email_column: str = "email"
    """The text column holding each user's address, matched as `lower(column)`: an index on
    that expression keeps the match an index scan (the worker warns at start without one)."""
    users_link_column: str = "pdf_url"
    """The text column pdfqueue writes the link into; a user whose column is not NULL is
    already linked, and is never linked again."""
    users_link_template: str = "{key}"
    """What the link column receives: `{key}` (the PDF's key under `storage_url`, the
    default), or a URL made of it: `s3://{bucket}/{prefix}{key}` (the object's S3 URI;
    `{prefix}` is the storage URL's prefix with its `/`, or nothing), or
    `https://files.example.com/{key}`. Erasure and retention recognise the links pdfqueue
    wrote by this template: change it only together with the links already written."""
    users_tenant_column: str | None = None
    """Text column of the users table naming each user's tenant. When set, a batch matches
    and links only users whose column equals the batch's tenant (taken from the batch's row);
    unset, every tenant matches against every user."""

    @field_validator("users_table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if not _IDENT.fullmatch(value):
            msg = f"PDFQUEUE_USERS_TABLE {value!r} is not a plain [schema.]table name"
            raise ValueError(msg)
        return value

    @field_validator(
        "users_id_column", "users_email_column", "users_link_column", "users_tenant_column"
    )
    @classmethod
    def _check_column(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not _COLUMN.fullmatch(value):
            name = "PDFQUEUE_" + str(info.field_name).upper()
            msg = f"{name} {value!r} is not a plain column name"
            raise ValueError(msg)
        return value

    @field_validator("users_link_template")
    @classmethod
    def _check_template(cls, value: str) -> str:
        try:
            parts = [(f, spec or conv) for _, f, spec, conv in Formatter().parse(value) if f]
        except ValueError as exc:
            msg = f"PDFQUEUE_USERS_LINK_TEMPLATE is not a template ({exc})"
            raise ValueError(msg) from None
        fields = [f for f, _ in parts]
        if fields.count("key") != 1 or not set(fields) <= LINK_FIELDS or any(s for _, s in parts):
            msg = (
                "PDFQUEUE_USERS_LINK_TEMPLATE names {key} exactly once, and may name {bucket}"
                f" and {{prefix}}: nothing else, no format specs (got {value!r})"
            )
            raise ValueError(msg)
        return value
