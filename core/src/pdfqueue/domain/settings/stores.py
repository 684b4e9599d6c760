"""Where pdfqueue keeps its work: Redis, PostgreSQL, S3 (the users table: `users`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pdfqueue.domain.tenants import valid_tenant

_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")
_KMS_KEY_ID = re.compile(r"[A-Za-z0-9:/_.+=@-]{1,2048}")
"""A KMS key as S3 takes it: a key id, an alias (`alias/name`), or either's ARN."""


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
    """Stores: Redis, PostgreSQL, S3.

    Where pdfqueue keeps its work: the queue and live state, the durable record, the host
    application's users, the ZIPs and the linked PDFs.
    """

    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis holding the arq queue and live batch state. Must be `noeviction` with AOF."""
    redis_strict: bool = False
    """Refuse to start (instead of warning) when Redis is not `noeviction` with AOF on."""
    redis_ca_file: str | None = None
    """CA certificates (PEM) that a `rediss://` Redis's certificate must chain to (a private
    CA, a managed service's bundle); unset, the system's. Over `rediss://` the certificate
    and the host name in the URL are always verified. An ACL user goes in the URL:
    `rediss://pdfqueue@host:6380/0`, its password in `redis_password`."""
    redis_cert_file: str | None = None
    """Client certificate (PEM) for a Redis that asks for one (`tls-auth-clients`); with
    `redis_key_file`."""
    redis_key_file: str | None = None
    """The key of `redis_cert_file` (PEM, unencrypted)."""
    database_url: str = "postgresql://pdfqueue:pdfqueue@127.0.0.1:5432/pdfqueue"
    """PostgreSQL holding the durable record and the host application's users table. TLS as
    libpq spells it in the URL: `?sslmode=verify-full&sslrootcert=/ca.pem` (and `sslcert`,
    `sslkey` for a client certificate)."""
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
    s3_ca_file: str | None = Field(
        default=None, validation_alias=AliasChoices("PDFQUEUE_S3_CA_FILE", "AWS_CA_BUNDLE")
    )
    """CA certificates (PEM) that an `https://` S3 endpoint's certificate must chain to, for
    both ways pdfqueue reaches S3 (boto3, and the native requests of the per-PDF path);
    unset, the system's. `AWS_CA_BUNDLE` is read too, as boto3 would."""
    s3_sse: Literal["none", "sse-s3", "sse-kms"] = "none"
    """Server-side encryption asked for on every object pdfqueue writes (uploaded ZIPs and
    linked PDFs, on both ways it writes): `sse-s3` (S3's own keys, `AES256`), `sse-kms` (a KMS
    key: `s3_sse_kms_key_id`, else the bucket's default KMS key), or `none` (the bucket's
    default encryption applies, if any). Checked at start by writing a probe object, and on
    every write by the store's answer: a store that does not apply it is refused, never
    written to in the clear."""
    s3_sse_kms_key_id: str | None = None
    """The KMS key of `sse-kms`: a key id, `alias/<name>` or an ARN."""
    s3_sse_tenant_kms_key_ids: dict[str, str] = Field(default_factory=dict)
    """Per-tenant KMS keys of `sse-kms` as JSON, e.g. `{"acme": "alias/acme-pdfs"}`: a
    tenant's uploads and linked PDFs are encrypted with its own key, the others' with
    `s3_sse_kms_key_id`. A PDF linked to a user of a users table shared by tenants is stored
    once, under the key of the tenant whose batch linked it."""

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

    @field_validator("redis_ca_file", "redis_cert_file", "redis_key_file", "s3_ca_file")
    @classmethod
    def _check_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not Path(value).is_file():
            name = "PDFQUEUE_" + str(info.field_name).upper()
            msg = f"{name}: no such file: {value}"  # a path, not a secret
            raise ValueError(msg)
        return value

    @field_validator("s3_sse_kms_key_id")
    @classmethod
    def _check_kms_key(cls, value: str | None) -> str | None:
        if value is not None and not _KMS_KEY_ID.fullmatch(value):
            msg = "PDFQUEUE_S3_SSE_KMS_KEY_ID must be a KMS key id, alias/<name> or an ARN"
            raise ValueError(msg)
        return value

    @field_validator("s3_sse_tenant_kms_key_ids")
    @classmethod
    def _check_tenant_kms_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for tenant, key in value.items():
            if not valid_tenant(tenant) or not _KMS_KEY_ID.fullmatch(key):
                msg = (
                    "PDFQUEUE_S3_SSE_TENANT_KMS_KEY_IDS maps tenant names to KMS key ids,"
                    " aliases or ARNs"
                )
                raise ValueError(msg)
        return value

    @model_validator(mode="after")
    def _check_encryption(self) -> Self:
        if self.s3_sse != "sse-kms" and (self.s3_sse_kms_key_id or self.s3_sse_tenant_kms_key_ids):
            msg = "KMS keys are set but PDFQUEUE_S3_SSE is not sse-kms: set PDFQUEUE_S3_SSE=sse-kms"
            raise ValueError(msg)
        if self.s3_sse != "none" and not self.storage_url.startswith("s3://"):
            msg = "PDFQUEUE_S3_SSE applies to an s3:// PDFQUEUE_STORAGE_URL only"
            raise ValueError(msg)
        return self

    @model_validator(mode="after")
    def _check_client_certificate(self) -> Self:
        if (self.redis_cert_file is None) != (self.redis_key_file is None):
            msg = "PDFQUEUE_REDIS_CERT_FILE and PDFQUEUE_REDIS_KEY_FILE go together: set both"
            raise ValueError(msg)
        return self
