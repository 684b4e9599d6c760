"""`python -m bench.redis_memory`: Redis memory of 50,000-PDF batches, from upload to expiry.

Simulated, not parsed: each batch's Redis traffic is issued as production issues it, through
the real code and scripts (`BatchState` create/start/record, fair dispatch's register and
dispatch scripts, the idempotent enqueue), and arq's own part is done here the way arq's
worker does it (take a job off the queue, delete its job key, keep its result for
`keep_result`, serialized as arq serializes it; a running job holds its `in-progress` key).
Not simulated: arq's `retry` key (one short counter per running job, gone when it ends), and
Redis's own bookkeeping of clients. Members are realistic in size (names like
`resumes/2024/candidate-000123.pdf`, offsets and CRCs of a 50,000-member ZIP).

Memory is INFO's `used_memory` less what it was before; per key kind it is MEMORY USAGE
summed over the batch's keys. TTLs are shortened (`--ttl`) so expiry can be watched: a key's
size does not depend on its TTL.

    uv run python -m bench.redis_memory [--pdfs 50000] [--batches 20] [--ttl 400]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import serialize_result
from redis.asyncio import Redis

from bench.report import save, utc_stamp
from pdfqueue.domain import keys
from pdfqueue.domain.models import Outcome
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.redis.fair_dispatch import Dispatcher
from pdfqueue.stores.redis.queue import Job, deserialize, serialize
from pdfqueue.stores.redis.state import BatchState, utcnow

TENANTS = 4
OUTCOMES = (Outcome.LINKED,) * 8 + (Outcome.SKIPPED_NO_MATCH, Outcome.FAILED)


def _member(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "name": f"resumes/2024/candidate-{index:06d}.pdf",
        "offset": 1_000_000 + index * 48_213,
        "compressed_size": 41_877,
        "size": 52_311,
        "method": 8,
        "crc": 3_735_928_559 - index,
    }


class Sim:
    """One Redis, one queue: batches registered, released and finished as production does."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.state = BatchState(redis, settings.batch_ttl_s)
        self.fair = Dispatcher.from_settings(redis, settings)
        self.keep_result_ms = settings.batch_ttl_s * 1000
        self.ran = 0
        self.target = 0

    async def upload(self, batch_id: str, tenant: str) -> None:
        """The API: live state, and the ingest job in arq's queue."""
        await self.state.create(batch_id, tenant, utcnow(), "resumes-2024.zip")
        job = {"batch_id": batch_id, "source": f"uploads/{batch_id}.zip"}
        await self._enqueue(keys.ingest_job(batch_id), "ingest", job)

    async def ingest(self, batch_id: str, tenant: str, pdfs: int) -> None:
        """`ingest`: start the batch and register its process jobs with fair dispatch."""
        await self._finish(keys.ingest_job(batch_id), f"{pdfs} PDFs")
        await self.state.start(batch_id, pdfs, 1)
        per = self.settings.pdfs_per_job
        jobs = (
            Job(
                keys.process_job(batch_id, first),
                "process",
                {
                    "batch_id": batch_id,
                    "source": f"uploads/{batch_id}.zip",
                    "members": [_member(i) for i in range(first, min(first + per, pdfs))],
                },
                cost=min(per, pdfs - first),
            )
            for first in range(0, pdfs, per)
        )
        await self.fair.register(batch_id, tenant, jobs, self.settings.enqueue_chunk)
        await self.fair.dispatch()

    async def work(self, jobs: int, concurrency: int) -> None:
        """arq plus `process`: `concurrency` workers run released jobs as arq does (claim an
        in-progress key, record 16 outcomes, drop the job, keep its result, refill) until
        `jobs` have run."""
        self.target += jobs
        await asyncio.gather(*(self._worker() for _ in range(concurrency)))

    async def _worker(self) -> None:
        while self.ran < self.target:
            ready = await self.redis.zrangebyscore(
                self.settings.queue_name, "-inf", _ms(), start=0, num=8
            )
            claimed = None
            for raw in ready:
                job_id = raw.decode()
                if await self.redis.set(in_progress_key_prefix + job_id, b"1", nx=True, px=60_000):
                    claimed = job_id
                    break
            if claimed is None:
                await asyncio.sleep(0.005)
                continue
            if await self._process(claimed):
                self.ran += 1

    async def _process(self, job_id: str) -> bool:
        data = await self.redis.get(job_key_prefix + job_id)
        if data is None:  # finished by another worker since it was listed
            await self.redis.delete(in_progress_key_prefix + job_id)
            return False
        kwargs = deserialize(data)["k"]
        batch_id = kwargs["batch_id"]
        pairs = [(m["index"], OUTCOMES[m["index"] % len(OUTCOMES)]) for m in kwargs["members"]]
        await self.state.record(batch_id, pairs)
        await self._finish(job_id, f"{len(pairs)} linked", kwargs)
        await self.fair.dispatch(job_id)
        return True

    async def _enqueue(self, job_id: str, function: str, kwargs: dict[str, Any]) -> None:
        payload = serialize({"t": 1, "f": function, "a": [], "k": kwargs, "et": _ms()})
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.psetex(job_key_prefix + job_id, 7 * 86_400_000, payload)
            pipe.zadd(self.settings.queue_name, {job_id: _ms()})
            await pipe.execute()

    async def _finish(self, job_id: str, result: str, kwargs: dict[str, Any] | None = None) -> None:
        """What arq's worker does when a job ends: drop the job, keep its result."""
        if kwargs is None:
            raw = await self.redis.get(job_key_prefix + job_id)
            kwargs = deserialize(raw)["k"] if raw else {}
        function = job_id.split(":", 1)[0]
        data = serialize_result(
            function,
            (),
            kwargs,
            1,
            _ms(),
            True,
            result,
            _ms(),
            _ms(),
            job_id,
            self.settings.queue_name,
            job_id,
            serializer=serialize,
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.settings.queue_name, job_id)
            pipe.delete(job_key_prefix + job_id, in_progress_key_prefix + job_id)
            pipe.set(result_key_prefix + job_id, data or b"", px=self.keep_result_ms)
            await pipe.execute()


def _ms() -> int:
    return int(time.time() * 1000)


async def used(redis: Redis) -> int:
    info = await redis.info("memory")
    return int(info["used_memory"])


async def by_kind(redis: Redis, marks: list[str]) -> dict[str, int]:
    """MEMORY USAGE of every key naming one of `marks`, summed per kind of key."""
    sizes: Counter[str] = Counter()
    async for raw in redis.scan_iter(count=2000):
        key = raw.decode()
        if not any(m in key for m in marks):
            continue
        size = await redis.memory_usage(key, samples=0) or 0
        sizes[_kind(key, marks)] += size
    return dict(sizes)


def _kind(key: str, marks: list[str]) -> str:
    for mark in marks:
        key = key.replace(mark, "<id>")
    parts = key.split(":")
    if parts[0] == "arq":
        return ":".join(parts[:3])  # arq:result:process
    return ":".join(p for p in parts if not p.isdigit())


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    settings = Settings(queue_name=f"bench-mem:{run}", batch_ttl_s=args.ttl)
    redis = Redis.from_url(settings.redis_url)
    sim = Sim(redis, settings)
    report: dict[str, Any] = {"pdfs_per_batch": args.pdfs, "pdfs_per_job": settings.pdfs_per_job}
    try:
        report["one_batch"] = await one_batch(sim, redis, args)
        report["in_flight"] = flight = await many_batches(sim, redis, args)
        per_pdf = report["one_batch"]["bytes_per_pdf"]["completed"]
        flight["projected_all_completed_bytes"] = int(per_pdf * flight["pdfs"])
    finally:
        await redis.aclose()
    return report


async def one_batch(sim: Sim, redis: Redis, args: argparse.Namespace) -> dict[str, Any]:
    """Memory of one batch at each step of its life, and what is left after expiry."""
    base = await used(redis)
    batch_id = uuid.uuid4().hex
    steps: dict[str, int] = {}
    await sim.upload(batch_id, "t0")
    steps["uploaded"] = await used(redis) - base
    await sim.ingest(batch_id, "t0", args.pdfs)
    steps["ingested"] = await used(redis) - base
    kinds_ingested = await by_kind(redis, [batch_id])
    jobs = -(-args.pdfs // sim.settings.pdfs_per_job)
    await sim.work(jobs // 2, args.concurrency)
    steps["half_done"] = await used(redis) - base
    await sim.work(jobs - jobs // 2, args.concurrency)
    steps["completed"] = await used(redis) - base
    kinds_completed = await by_kind(redis, [batch_id])
    status = await sim.state.status(batch_id)
    await asyncio.sleep(args.ttl + 2)
    left = await by_kind(redis, [batch_id])
    steps["after_ttl"] = await used(redis) - base
    await drop(redis, [batch_id])
    return {
        "status": status.value if status else None,
        "used_memory_bytes": steps,
        "bytes_per_pdf": {k: round(v / args.pdfs, 1) for k, v in steps.items()},
        "keys_at_ingest_bytes": kinds_ingested,
        "keys_at_completion_bytes": kinds_completed,
        "keys_after_ttl_bytes": left,
    }


async def many_batches(sim: Sim, redis: Redis, args: argparse.Namespace) -> dict[str, Any]:
    """`--batches` batches in flight at once (over TENANTS tenants): all ingested, then
    `--work` of their jobs run. Running all of them to completion here would take an hour
    of this shared machine; completion costs per PDF what one batch's does (see
    `one_batch`), so the report gives that figure times the PDFs in flight as well."""
    base = await used(redis)
    ids = [uuid.uuid4().hex for _ in range(args.batches)]
    for i, batch_id in enumerate(ids):
        await sim.upload(batch_id, f"t{i % TENANTS}")
    for i, batch_id in enumerate(ids):
        await sim.ingest(batch_id, f"t{i % TENANTS}", args.pdfs)
    ingested = await used(redis) - base
    total_jobs = args.batches * -(-args.pdfs // sim.settings.pdfs_per_job)
    ran = int(total_jobs * args.work)
    await sim.work(ran, args.concurrency)
    worked = await used(redis) - base
    pdfs = args.batches * args.pdfs
    await drop(redis, [*ids, sim.settings.queue_name])
    return {
        "batches": args.batches,
        "pdfs": pdfs,
        "jobs_run": ran,
        "used_memory_bytes": {"all_ingested": ingested, f"{args.work:.0%}_of_jobs_run": worked},
        "bytes_per_pdf": {
            "all_ingested": round(ingested / pdfs, 1),
            f"{args.work:.0%}_of_jobs_run": round(worked / pdfs, 1),
        },
    }


async def drop(redis: Redis, marks: list[str]) -> None:
    """Delete what the bench left (pending work keeps for a week otherwise)."""
    async for raw in redis.scan_iter(count=2000):
        if any(m in raw.decode() for m in marks):
            await redis.delete(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_memory")
    parser.add_argument("--pdfs", type=int, default=50_000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument(
        "--ttl", type=int, default=400, help="batch TTL and keep_result (s): above the run"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="simulated running jobs")
    parser.add_argument("--work", type=float, default=0.05, help="share of jobs run in flight")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args))
    report["at"] = datetime.now(UTC).isoformat()
    print(json.dumps(report, indent=2))
    save(f"redis-memory-{utc_stamp()}", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
