"""CPU per S3 call: boto3 on the thread pool against the native asyncio path (`AsyncS3`).

Sequential put + ranged read of one PDF-sized object, as a worker does per PDF, against the
S3 server of `tools/services.sh` (its `env` exported). `time.process_time` counts every
thread of the process, so the hand-off to the pool is included.

    uv run python -m bench.storage_calls [--calls 500] [--size 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage import Storage


async def _measure(calls: int, step: Callable[[int], Awaitable[None]]) -> tuple[float, float]:
    """CPU and wall milliseconds per put + read pair."""
    for i in range(20):  # warm up: connections, credentials, endpoint resolution
        await step(i)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(calls):
        await step(i)
    return (
        (time.process_time() - cpu) * 1000 / calls,
        (time.perf_counter() - wall) * 1000 / calls,
    )


async def main(calls: int, size: int, rounds: int) -> None:
    settings = Settings(storage_url=f"s3://pdfqueue/bench-{uuid.uuid4().hex[:8]}")
    storage = Storage.from_settings(settings, threads=8)
    await storage.ensure_bucket()
    data = b"%PDF-1.4 " + os.urandom(size)
    backend = storage.backend

    async def old(i: int) -> None:
        await storage.run(backend.put, f"old/{i}.pdf", data)
        assert len(await storage.run(backend.read_range, f"old/{i}.pdf", 0, len(data))) == len(data)

    async def new(i: int) -> None:
        await storage.put(f"new/{i}.pdf", data)
        assert len(await storage.read_range(f"new/{i}.pdf", 0, len(data))) == len(data)

    try:
        for r in range(rounds):  # alternate, so neither path always runs on a warmer server
            for name, step in (("boto3 + thread", old), ("asyncio (AsyncS3)", new)):
                cpu, wall = await _measure(calls, step)
                print(
                    f"round {r + 1} {name:18} {calls} x put+read_range of {len(data)} B: "
                    f"CPU {cpu:.3f} ms/pair ({cpu / 2:.3f} ms/call), wall {wall:.3f} ms/pair"
                )
    finally:
        for i in range(calls):
            await storage.delete(f"old/{i}.pdf")
            await storage.delete(f"new/{i}.pdf")
        await storage.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--size", type=int, default=30_000, help="object bytes")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.size, args.rounds))
