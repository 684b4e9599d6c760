"""What the shared stores did: Redis commands, bytes and memory; PostgreSQL transactions and rows.

Counters are read before and after a measured run and subtracted, so the costs per PDF do
not depend on how loaded the machine was. Redis counts the commands scripts call inside
EVAL too (INFO commandstats); PostgreSQL's per-database counters stand in for
pg_stat_statements (not loaded here): every pdfqueue statement runs in its own implicit
transaction, so committed transactions count statements.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import asyncpg
from redis import Redis

PG_COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "blks_read",
    "blks_hit",
)
STATS_FLUSH_S = 11.0
"""An idle PostgreSQL backend publishes what it counted within 10 s (PGSTAT_IDLE_INTERVAL)."""


def info(r: Redis, section: str) -> dict[str, Any]:
    """One INFO section (redis-py types a sync client's replies as maybe awaitable)."""
    reply = r.info(section)
    assert isinstance(reply, dict), reply
    return reply


def dbsize(r: Redis) -> int:
    """Keys in the database."""
    reply = r.dbsize()
    assert isinstance(reply, int), reply
    return reply


def memory_usage(r: Redis, key: bytes) -> int:
    """Bytes one key takes (0 when it is gone)."""
    reply = r.memory_usage(key)
    assert reply is None or isinstance(reply, int), reply
    return reply or 0


def redis_counters(r: Redis) -> dict[str, Any]:
    """Calls and CPU per command, network bytes, memory and keys, from INFO."""
    commands = info(r, "commandstats")
    stats = info(r, "stats")
    memory = info(r, "memory")
    cpu = info(r, "cpu")
    return {
        "calls": {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in commands.items()},
        "usec": {k.removeprefix("cmdstat_"): int(v["usec"]) for k, v in commands.items()},
        "net_in_bytes": int(stats["total_net_input_bytes"]),
        "net_out_bytes": int(stats["total_net_output_bytes"]),
        "used_memory": int(memory["used_memory"]),
        "cpu_s": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        "keys": dbsize(r),
    }


async def _pg_counters(dsn: str) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            f"SELECT {', '.join(PG_COUNTERS)}, pg_current_wal_lsn() - '0/0'::pg_lsn AS wal_bytes"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {k: int(row[k]) for k in (*PG_COUNTERS, "wal_bytes")}


def pg_counters(dsn: str) -> dict[str, int]:
    return asyncio.run(_pg_counters(dsn))


def snapshot(r: Redis, dsn: str) -> dict[str, Any]:
    return {"redis": redis_counters(r), "postgres": pg_counters(dsn)}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after - before, per counter (commands that did not run are left out)."""
    rb, ra = before["redis"], after["redis"]
    calls = {k: v - rb["calls"].get(k, 0) for k, v in ra["calls"].items()}
    usec = {k: v - rb["usec"].get(k, 0) for k, v in ra["usec"].items()}
    return {
        "redis": {
            "calls": {k: v for k, v in sorted(calls.items()) if v},
            "usec": {k: usec[k] for k, v in sorted(calls.items()) if v},
            "net_in_bytes": ra["net_in_bytes"] - rb["net_in_bytes"],
            "net_out_bytes": ra["net_out_bytes"] - rb["net_out_bytes"],
            "cpu_s": round(ra["cpu_s"] - rb["cpu_s"], 3),
        },
        "postgres": {k: after["postgres"][k] - before["postgres"][k] for k in before["postgres"]},
    }


def per_pdf(d: dict[str, Any], n: int) -> dict[str, float]:
    """The headline costs of one PDF, from a `delta` over a run of `n` PDFs."""
    r, pg = d["redis"], d["postgres"]
    return {
        "redis_calls": round(sum(r["calls"].values()) / n, 2),
        "redis_cpu_usec_commands": round(sum(r["usec"].values()) / n, 1),
        "redis_cpu_usec_process": round(r["cpu_s"] * 1e6 / n, 1),
        "redis_net_in_bytes": round(r["net_in_bytes"] / n),
        "redis_net_out_bytes": round(r["net_out_bytes"] / n),
        "pg_transactions": round((pg["xact_commit"] + pg["xact_rollback"]) / n, 3),
        "pg_rows_inserted": round(pg["tup_inserted"] / n, 3),
        "pg_rows_updated": round(pg["tup_updated"] / n, 3),
        "pg_rows_fetched": round(pg["tup_fetched"] / n, 3),
        "pg_wal_bytes": round(pg["wal_bytes"] / n),
    }


class MemoryPeak:
    """A thread reading Redis `used_memory` and key count every `interval_s`; keeps the peak."""

    def __init__(self, url: str, interval_s: float = 0.5) -> None:
        self.url = url
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.peak_keys = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-memory", daemon=True)

    def _sample(self, r: Redis) -> None:
        self.peak_bytes = max(self.peak_bytes, int(info(r, "memory")["used_memory"]))
        self.peak_keys = max(self.peak_keys, dbsize(r))

    def _run(self) -> None:
        with Redis.from_url(self.url) as r:
            while not self._stop.wait(self.interval_s):
                self._sample(r)
            self._sample(r)

    def start(self) -> MemoryPeak:
        self._thread.start()
        return self

    def stop(self) -> MemoryPeak:
        self._stop.set()
        self._thread.join(timeout=10)
        return self


def settle_stats() -> None:
    """Wait until PostgreSQL backends have published what they counted."""
    time.sleep(STATS_FLUSH_S)
