"""`python -m bench.load`: many workers' Redis and PostgreSQL traffic, without parsing or S3.

Real arq workers (`pdfqueue_worker.app.build_worker`) run the real `process` task against the
real Redis and PostgreSQL; only the object store and the parser are replaced: the archive
holds a stored stub PDF at each member's offset (read and inflated by the worker's own code),
parsing returns the address of the user the member is named after, storing does nothing. So
every job of 16 PDFs issues what production issues: arq's dequeue (poll, WATCH, MULTI/EXEC,
result), the batch status and unrecorded checks, one user lookup, one claim statement and the
recording script; the batch is enqueued as `ingest` enqueues it. A level whose batch did not
link every PDF fails. The number of simulated worker processes steps up until throughput
stops growing.

    uv run python -m bench.load [--levels 1,2,4,8] [--jobs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import asyncpg
from redis.asyncio import Redis as AsyncRedis

from bench import store_costs
from bench.pipeline import Bench
from bench.procs import Sampler
from bench.report import save, utc_stamp
from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.users import UserStore
from pdfqueue.stores.redis.queue import Job, enqueue_chunked
from pdfqueue.stores.redis.state import utcnow
from pdfqueue_dev.processes import wait_until
from pdfqueue_worker.app import build_worker
from pdfqueue_worker.candidates import Candidate, Source
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.parse import Extraction
from pdfqueue_worker.payload import LOCAL_HEADER, LOCAL_SIGNATURE, Member

TENANT = "load"
PROCESSES = 4
"""Client processes the simulated workers are spread over (Python runs one core each)."""
SPARE_CONNECTIONS = 12
"""PostgreSQL connections kept free for the bench itself and anyone else."""
CHILD_LIFETIME_S = 1800.0
"""A simulated worker process ends after this long even if nobody tells it to."""
TICK_S = 0.1
GROWTH = 1.10
"""Less added throughput than this factor, at two levels in a row, ends the stepping."""


def email(user_id: int) -> str:
    return f"load{user_id}@people.example"


SLOT = 4096
"""Where the stub archive holds member i: at i * SLOT."""
STUB_PDF = b"%PDF-1.4 stub\n"
STUB_ENTRY = (
    LOCAL_HEADER.pack(
        LOCAL_SIGNATURE, 20, 0, 0, 0, 0, 0, zlib.crc32(STUB_PDF), *[len(STUB_PDF)] * 2, 8, 0
    )
    + b"stub.pdf"
    + STUB_PDF
)
"""One stored member: every slot of the stub archive holds it."""


class StubStorage:
    """The object store's interface as `process` uses it; nothing leaves this process. Every
    archive holds STUB_ENTRY at each SLOT, so reading and inflating a member is the real code."""

    backend = None
    encrypts_by_tenant = False

    async def read_range(self, key: str, start: int, length: int) -> bytes:
        slots = bytes(STUB_ENTRY.ljust(SLOT, b"\0")) * (2 + length // SLOT)
        return slots[start % SLOT : start % SLOT + length]

    async def run(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def put(self, key: str, data: bytes, **_: str | None) -> None:
        return None

    async def delete(self, key: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


class StubExtractor:
    """The parser's interface: each member's address is its user's, found on page one (the
    user's id is the member's name)."""

    async def extract_members(
        self,
        items: list[tuple[bytes, Member, int]],
        *,
        together: bool = True,
        until: float | None = None,
    ) -> AsyncIterator[tuple[int, Extraction]]:
        del together, until
        for i, (_, member, _) in enumerate(items):
            user_id = int(member.name.removeprefix("resumes/").removesuffix(".pdf"))
            found = Candidate(email(user_id), Source.TEXT, page=0, contact=True)
            yield i, Extraction(candidates=(found,), pages=1, has_text=True)

    def close(self) -> None:
        return None


async def _startup(ctx: dict[str, Any]) -> None:
    """`pdfqueue_worker.app.startup` with the real stores and stub storage and parsing."""
    settings: Settings = ctx["settings"]
    pool = await connect(settings.database_url, max_size=settings.max_jobs + 4)
    lifecycle = lifecycle_over(pool, ctx["redis"], settings)
    ctx["deps"] = Deps(
        settings=settings,
        redis=ctx["redis"],
        lifecycle=lifecycle,
        pool=pool,
        batches=lifecycle.batches,
        files=lifecycle.files,
        users=UserStore(pool, UsersTable.of(settings)),
        storage=StubStorage(),  # type: ignore[arg-type]
        extractor=StubExtractor(),  # type: ignore[arg-type]
    )


async def _shutdown(ctx: dict[str, Any]) -> None:
    if "deps" in ctx:
        await ctx["deps"].pool.close()


async def _child(workers: int, ready_key: str, stop_key: str) -> None:
    settings = Settings()
    arq_workers = [
        build_worker(settings, handle_signals=False, on_startup=_startup, on_shutdown=_shutdown)
        for _ in range(workers)
    ]
    runs = [asyncio.create_task(w.async_run()) for w in arq_workers]
    redis = AsyncRedis.from_url(settings.redis_url)
    try:
        for _ in range(int(CHILD_LIFETIME_S / TICK_S)):
            if all("deps" in w.ctx for w in arq_workers) or any(r.done() for r in runs):
                break
            await asyncio.sleep(TICK_S)
        if not all("deps" in w.ctx for w in arq_workers):
            raise RuntimeError(
                f"workers did not start: {[r.exception() for r in runs if r.done()]}"
            )
        await redis.incr(ready_key)
        for _ in range(int(CHILD_LIFETIME_S / TICK_S)):  # bounded: a lost parent ends it too
            if await redis.exists(stop_key):
                break
            await asyncio.sleep(TICK_S)
    finally:
        for w in arq_workers:
            await w.close()
        await asyncio.gather(*runs, return_exceptions=True)
        await redis.aclose()


def child_main(workers: int, ready_key: str, stop_key: str) -> None:
    asyncio.run(_child(workers, ready_key, stop_key))


async def _open_batch(settings: Settings, first_user: int, jobs: int, per_job: int) -> str:
    """Register a batch as the API and `ingest` do, and enqueue its process jobs."""
    batch_id = uuid.uuid4().hex
    total = jobs * per_job
    redis = AsyncRedis.from_url(settings.redis_url)
    pool = await connect(settings.database_url, max_size=2)
    try:
        lifecycle = lifecycle_over(pool, redis, settings)
        await lifecycle.batches.create(
            batch_id, TENANT, f"uploads/{batch_id}.zip", queue_name=lifecycle.queue_name
        )
        await lifecycle.state.create(batch_id, TENANT, utcnow())
        await lifecycle.start(batch_id, total, [])
        payload = (
            Job(
                keys.process_job(batch_id, j * per_job),
                "process",
                {
                    "batch_id": batch_id,
                    "source": f"uploads/{batch_id}.zip",
                    "members": [_member(j * per_job + i, first_user) for i in range(per_job)],
                },
            )
            for j in range(jobs)
        )
        await enqueue_chunked(redis, settings.queue_name, payload, settings.enqueue_chunk)
    finally:
        await pool.close()
        await redis.aclose()
    return batch_id


def _member(index: int, first_user: int) -> dict[str, Any]:
    return {
        "index": index,
        "name": f"resumes/{first_user + index}.pdf",
        "offset": index * SLOT,
        "compressed_size": len(STUB_PDF),
        "size": len(STUB_PDF),
        "method": 0,
        "crc": zlib.crc32(STUB_PDF),
    }


async def _seed_users(dsn: str, schema: str, count: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(
            f'CREATE TABLE "{schema}".users (id bigint primary key, email text not null unique,'
            " pdf_url text)"
        )
        await conn.execute(f'CREATE INDEX ON "{schema}".users (lower(email))')
        await conn.copy_records_to_table(
            "users",
            schema_name=schema,
            records=[(i, email(i), None) for i in range(1, count + 1)],
            columns=["id", "email", "pdf_url"],
        )
        await conn.execute(f'ANALYZE "{schema}".users')
    finally:
        await conn.close()


def _pid_of(process: BaseProcess) -> Callable[[], int | None]:
    """The process's pid, for the sampler."""
    return lambda: process.pid


def run_level(bench: Bench, settings: Settings, workers: int, args: argparse.Namespace) -> Any:
    """Start `workers` simulated workers, run one batch of `args.jobs` jobs through them."""
    level = len(bench.batches)
    ready_key, stop_key = f"{settings.queue_name}:ready:{level}", f"{settings.queue_name}:stop"
    spread = [workers // PROCESSES + (i < workers % PROCESSES) for i in range(PROCESSES)]
    ctx = multiprocessing.get_context("spawn")
    children = [ctx.Process(target=child_main, args=(n, ready_key, stop_key)) for n in spread if n]
    r: Any = bench.redis()  # redis-py types its sync replies as maybe awaitable
    r.delete(stop_key)
    for c in children:
        c.start()
    try:
        ready = lambda: int(r.get(ready_key) or 0) >= len(children)  # noqa: E731
        wait_until(ready, "workers ready", 120, interval_s=0.05)
        store_costs.settle_stats()
        before = store_costs.snapshot(r, bench.database_url)  # idle workers poll Redis only
        sampler = Sampler(0.5, services=bench.services)
        for i, c in enumerate(children):
            sampler.watch(f"client-{i}", _pid_of(c))
        sampler.start()
        started = time.monotonic()
        first_user = 1 + level * args.jobs * settings.pdfs_per_job
        batch_id = asyncio.run(_open_batch(settings, first_user, args.jobs, settings.pdfs_per_job))
        bench.batches.append(batch_id)
        done = lambda: r.hget(keys.batch(batch_id), "status") == b"COMPLETED"  # noqa: E731
        wait_until(done, f"batch at {workers} workers", args.timeout_s, interval_s=0.05)
        linked = int(r.hget(keys.batch(batch_id), "linked") or 0)
        if linked != args.jobs * settings.pdfs_per_job:  # a stub out of step with the worker
            raise RuntimeError(f"batch {batch_id}: {linked} PDFs linked, not every one")
        seconds = time.monotonic() - started
        sampler.stop()
        after = {"redis": store_costs.redis_counters(r)}  # before the idle polls that follow
    finally:
        r.set(stop_key, 1, ex=600)
        for c in children:
            c.join(timeout=60)
            if c.is_alive():
                c.kill()
    store_costs.settle_stats()
    after["postgres"] = store_costs.pg_counters(bench.database_url)
    pdfs = args.jobs * settings.pdfs_per_job
    return _level_report(workers, pdfs, seconds, before=before, after=after, sampler=sampler)


def _level_report(
    workers: int, pdfs: int, seconds: float, *, before: Any, after: Any, sampler: Sampler
) -> dict[str, Any]:
    d = store_costs.delta(before, after)
    res = sampler.report()
    clients = sum(g["cpu_main_s"] + g["cpu_children_s"] for g in res["groups"].values())
    services: dict[str, float] = res["services_cpu_s"]
    return {
        "workers": workers,
        "pdfs": pdfs,
        "seconds": round(seconds, 2),
        "pdfs_per_s": round(pdfs / seconds, 1),
        "redis_ops_per_s": round(sum(d["redis"]["calls"].values()) / seconds),
        "pg_transactions_per_s": round(d["postgres"]["xact_commit"] / seconds),
        "cpu_share_of_a_core": {
            "redis": round(services.get("redis", 0) / seconds, 3),
            "postgres": round(services.get("postgres", 0) / seconds, 3),
            "clients": round(clients / seconds, 3),
            "machine": round(res["machine_busy_cpu_s"] / seconds, 3),
        },
        "cpu_ms_per_pdf": {
            "redis": round(1000 * services.get("redis", 0) / pdfs, 3),
            "postgres": round(1000 * services.get("postgres", 0) / pdfs, 3),
            "clients": round(1000 * clients / pdfs, 3),
        },
        "per_pdf": store_costs.per_pdf(d, pdfs),
        "redis_calls_per_job": {
            k: round(v * 16 / pdfs, 2) for k, v in d["redis"]["calls"].items() if v * 16 >= pdfs
        },
    }


def _stopped_growing(rates: list[float]) -> bool:
    """The last two levels both fell short of GROWTH x the best before them (one short
    level alone is noise on a shared machine)."""
    if len(rates) < 3:
        return False
    best = max(rates[:-2])
    return all(rate < GROWTH * best for rate in rates[-2:])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    p.add_argument("--levels", default="1,2,4,8", help="simulated worker processes per step")
    p.add_argument("--jobs", type=int, default=200, help="process jobs (of 16 PDFs) per step")
    p.add_argument("--timeout-s", type=float, default=600, help="per step (600)")
    args = p.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    return args


def _configure(run_id: str) -> Settings:
    """The children's settings come from the environment, as a worker's do."""
    os.environ.update(
        PDFQUEUE_QUEUE_NAME=f"pdfqueue:load-{run_id}",
        PDFQUEUE_USERS_TABLE=f"load_{run_id}.users",
        PDFQUEUE_METRICS_PORT="0",
        OTEL_SDK_DISABLED="true",
        OTEL_TRACES_EXPORTER="none",
    )
    # each simulated worker is the chart's pod: one parser, so 4 jobs at once
    os.environ.setdefault("PDFQUEUE_EXTRACT_PROCESSES", "1")
    return Settings()


def _max_workers(dsn: str, settings: Settings) -> int:
    async def limit() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval("SHOW max_connections"))
        finally:
            await conn.close()

    return (asyncio.run(limit()) - SPARE_CONNECTIONS) // (settings.max_jobs + 4)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = utc_stamp()
    run_id = f"l{stamp.lower()}"
    bench = Bench.from_environ(run_id, Path("/tmp") / f"pdfqueue-load-{stamp}")
    settings = _configure(run_id)
    asyncio.run(bench.prepare())
    ceiling = _max_workers(bench.database_url, settings)
    users = len(args.levels) * args.jobs * settings.pdfs_per_job
    asyncio.run(_seed_users(bench.database_url, f"load_{run_id}", users))
    rows: list[dict[str, Any]] = []
    try:
        for workers in args.levels:
            if workers > ceiling:
                print(f"- {workers} workers would need more than max_connections: stop")
                break
            print(f"- {workers} simulated workers, {args.jobs} jobs ...", flush=True)
            rows.append(run_level(bench, settings, workers, args))
            print(f"  {json.dumps({k: v for k, v in rows[-1].items() if k != 'per_pdf'})}")
            if _stopped_growing([r["pdfs_per_s"] for r in rows]):
                print("  throughput stopped growing")
                break
    finally:
        asyncio.run(_cleanup(bench, settings, f"load_{run_id}"))
    out: dict[str, Any] = {
        "started": stamp,
        "host": {"cores": os.cpu_count(), "load": os.getloadavg()},
    }
    out |= {"options": vars(args), "levels": rows}
    save(f"load-{stamp}", out)
    return 0


async def _cleanup(bench: Bench, settings: Settings, schema: str) -> None:
    """The batches' rows and keys, the simulated users, the queue and the bench's keys."""
    pool = await connect(bench.database_url, max_size=1)
    await pool.execute("DELETE FROM pdfqueue_files WHERE batch_id = ANY($1)", bench.batches)
    await pool.execute("DELETE FROM pdfqueue_batches WHERE id = ANY($1)", bench.batches)
    await pool.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await pool.close()
    with bench.redis() as r:
        for batch_id in bench.batches:
            r.delete(keys.batch(batch_id), keys.outcomes(batch_id))
            for key in r.scan_iter(match=f"arq:*{batch_id}*", count=1000):
                r.delete(key)
        for key in r.scan_iter(match=f"{settings.queue_name}*", count=1000):
            r.delete(key)


if __name__ == "__main__":
    sys.exit(main())
