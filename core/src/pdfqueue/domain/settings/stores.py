"""Where pdfqueue keeps its work: Redis, PostgreSQL (and the host's users table), S3."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr, field_validator, model_validator

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


def _with_password(service: str, url: str, password: object) -> str:
    """`url` with `password` in its user part; never echoes either (both are secrets)."""
    name = f"PDFQUEUE_{service.upper()}"
    secret = password.get_secret_value() if isinstance(password, SecretStr) else str(password)
    if not _URL_SAFE.fullmatch(secret):
        msg = f"{name}_PASSWORD may hold only A-Z a-z 0-9 - . _ ~ (it goes into a URL as it is)"
        raise ValueError(msg)
    parts = urlsplit(url)
    if parts.password is not None:
        msg = f"{name}_URL carries a password and {name}_PASSWORD is set: choose one"
        raise ValueError(msg)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{secret}@{host}"))


class StoreSettings(BaseModel):
    """Stores: Redis, PostgreSQL and its users table, S3.

    Where pdfqueue keeps its work: the queue and live state, the durable record, the host
    application's users, the ZIPs and the linked PDFs.
    """

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis holding the arq queue and live batch state. Must be `noeviction` with AOF."""
    redis_strict: bool = False
    """Refuse to start (instead of warning) when Redis is not `noeviction` with AOF on."""
    database_url: str = "postgresql://pdfqueue:pdfqueue@127.0.0.1:5432/pdfqueue"
    """PostgreSQL holding the durable record and the host application's users table."""
    redis_password: SecretStr | None = None
    """Password put into a `redis_url` that carries none (e.g. from a Kubernetes Secret, while
    the URL sits in a ConfigMap). URL-safe characters only: `A-Z a-z 0-9 - . _ ~`."""
    database_password: SecretStr | None = None
    """Password put into a `database_url` that carries none, like `redis_password`."""
    storage_url: str = "file://./.pdfqueue/storage"
    """Where uploads and linked PDFs live: `s3://bucket/prefix` or `file:///path`."""
    s3_endpoint_url: str | None = None
    """S3 endpoint for non-AWS stores (versitygw, MinIO); credentials come from `AWS_*`."""
    s3_path_style: bool = True
    """Address buckets by path (`endpoint/bucket/key`), which every S3-compatible server accepts."""
    s3_create_bucket: bool = True
    """Let `pdfqueue migrate` create the bucket when it does not exist."""
    users_table: str = "users"
    """The host application's table with columns `id`, `email`, `pdf_url`."""
    users_tenant_column: str | None = None
    """Text column of the users table naming each user's tenant. When set, a batch matches
    and links only users whose column equals the batch's tenant (taken from the batch's row);
    unset, every tenant matches against every user."""

    @model_validator(mode="before")
    @classmethod
    def _add_service_passwords(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        for service in ("redis", "database"):
            password = data.get(f"{service}_password")
            if password:
                url = data.get(f"{service}_url") or cls.model_fields[f"{service}_url"].default
                data = {**data, f"{service}_url": _with_password(service, str(url), password)}
        return data

    @field_validator("users_table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if not _IDENT.fullmatch(value):
            msg = f"PDFQUEUE_USERS_TABLE {value!r} is not a plain [schema.]table name"
            raise ValueError(msg)
        return value

    @field_validator("users_tenant_column")
    @classmethod
    def _check_column(cls, value: str | None) -> str | None:
        if value is not None and not _COLUMN.fullmatch(value):
            msg = f"PDFQUEUE_USERS_TENANT_COLUMN {value!r} is not a plain column name"
            raise ValueError(msg)
        return value
