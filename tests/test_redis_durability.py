"""The start-up look at Redis's durability, on a Redis that refuses CONFIG as managed ones do.

ElastiCache, MemoryDB and Memorystore restrict CONFIG but answer INFO
(https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/ClientConfig.RestrictedCommands.html):
here an ACL user without `config` stands for them. The check reads `maxmemory_policy` and
`aof_enabled` from INFO, so it sees a safe Redis as safe (a strict worker starts) and an
evicting or AOF-less one as what it is, and says it cannot see only where INFO is refused too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from pdfqueue.stores.redis.queue import check_durability
from pdfqueue_dev.processes import free_port
from tests.support.servers import serving

PASSWORD = "durability-test-password"


@contextlib.contextmanager
def _redis(tmp_path: Path, policy: str, aof: str) -> Iterator[int]:
    """redis-server with users `managed` (no CONFIG) and `noinfo` (no CONFIG, no INFO)."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    argv += ["--save", "", "--appendonly", aof, "--maxmemory-policy", policy]
    argv += ["--user", "default", "off"]
    argv += ["--user", "managed", "on", f">{PASSWORD}", "~*", "&*", "+@all", "-config"]
    argv += ["--user", "noinfo", "on", f">{PASSWORD}", "~*", "&*", "+@all", "-config", "-info"]
    with serving(argv, port, tmp_path / "redis.log"):
        yield port


@pytest.fixture(params=[("noeviction", "yes"), ("allkeys-lru", "yes"), ("noeviction", "no")])
def managed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[int, str, str]]:
    policy, aof = request.param
    with _redis(tmp_path, policy, aof) as port:
        yield port, policy, aof


async def test_a_redis_that_refuses_config_is_still_checked(
    managed: tuple[int, str, str],
) -> None:
    port, policy, aof = managed
    client = Redis(port=port, username="managed", password=PASSWORD)
    try:
        with pytest.raises(NoPermissionError):
            await client.config_get("maxmemory-policy")  # as ElastiCache refuses it
        problems = await check_durability(client)
    finally:
        await client.aclose()
    expected = []
    if policy != "noeviction":
        expected.append(
            f"maxmemory-policy is {policy!r}; queued jobs can be evicted (set it to 'noeviction')"
        )
    if aof != "yes":
        expected.append("appendonly is off; a Redis restart loses queued jobs (set appendonly yes)")
    assert problems == expected


async def test_only_a_redis_that_refuses_info_too_cannot_be_checked(tmp_path: Path) -> None:
    with _redis(tmp_path, "noeviction", "yes") as port:
        client = Redis(port=port, username="noinfo", password=PASSWORD)
        try:
            problems = await check_durability(client)
        finally:
            await client.aclose()
        assert len(problems) == 1
        assert problems[0].startswith("cannot verify Redis durability (INFO refused:")
