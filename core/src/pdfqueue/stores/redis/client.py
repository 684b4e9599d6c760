"""Connecting to Redis: one place that turns the settings into the options of redis-py's
clients and of arq's pools, TLS included, so that every process reaches Redis alike."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from arq.connections import RedisSettings
from redis.asyncio import Redis

from pdfqueue.domain.settings import StoreSettings
from pdfqueue.stores.driver_errors import redis_errors, typed_call

WORKER_CONN_RETRIES = 120
"""arq's tries to connect a worker's pool, a second apart: workers wait for Redis to come
back (producers, by contrast, fail fast)."""


def tls_options(settings: StoreSettings) -> dict[str, Any]:
    """redis-py's TLS options for a `rediss://` URL: the certificate and the URL's host name
    verified, against `redis_ca_file` when set; a client certificate when one is set. None
    for `redis://`."""
    if not settings.redis_url.startswith("rediss://"):
        return {}
    return {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": settings.redis_ca_file,
        "ssl_certfile": settings.redis_cert_file,
        "ssl_keyfile": settings.redis_key_file,
    }


def open_redis(
    settings: StoreSettings,
    *,
    connect_timeout_s: float | None = None,
    timeout_s: float | None = None,
) -> Redis:
    """A client of the settings' Redis (it connects on first use)."""
    client: Redis = Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=connect_timeout_s,
        socket_timeout=timeout_s,
        **tls_options(settings),
    )
    return client


def arq_settings(settings: StoreSettings) -> RedisSettings:
    """arq's pool settings for the settings' Redis, as `open_redis` would connect: arq's own
    URL parsing leaves the host name unchecked and knows no CA file."""
    return replace(
        RedisSettings.from_dsn(settings.redis_url),
        conn_retries=WORKER_CONN_RETRIES,
        **tls_options(settings),
    )


@typed_call(redis_errors)
async def ping(redis: Redis) -> None:
    """Raise RedisUnavailable unless Redis answers; what refuses pdfqueue (TLS, credentials)
    raises as misconfigured."""
    await redis.ping()
