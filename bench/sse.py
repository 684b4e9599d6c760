"""API cost of live progress: N open event streams on one batch while it runs, RSS and CPU."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx

from bench import corpus
from bench.pipeline import TOKEN, Bench, Deployment
from bench.upload_rss import _idle_rss
from pdfqueue_dev.processes import wait_until

LIMIT_MB = 50


async def _clients(url: str, batch_id: str, n: int, opened: threading.Event) -> list[list[str]]:
    """Open `n` streams on the batch, read each to its end; every client's event ids."""
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=0)
    timeout = httpx.Timeout(30.0, read=120.0)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=timeout
    ) as http:
        ready = asyncio.Semaphore(0)

        async def one() -> list[str]:
            ids: list[str] = []
            async with http.stream("GET", f"/v1/batches/{batch_id}/events") as response:
                response.raise_for_status()
                ready.release()
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        ids.append(line[4:])
            return ids

        tasks = [asyncio.create_task(one()) for _ in range(n)]
        for _ in range(n):
            await ready.acquire()
        opened.set()
        return await asyncio.gather(*tasks)


def run_sse(bench: Bench, clients: int, files: int, seed: int) -> dict[str, Any]:
    """One worker runs a batch of `files` PDFs while `clients` streams follow it."""
    planned, path = corpus.corpus(files, seed)
    # one tenant opens every stream here: its share must hold them all
    share = {"PDFQUEUE_MAX_EVENT_STREAMS_PER_TENANT": str(clients)}
    with Deployment(bench, workers=1, extract_processes=1, tag="sse", env=share) as dep:
        dep.warm_up()
        asyncio.run(corpus.reseed(bench.database_url, bench.schema, planned))
        idle = dep.sampler()
        idle_mb = _idle_rss(idle)
        created = dep.client.upload(path)
        batch_id = created["batch_id"]
        bench.batches.append(batch_id)
        sampler = dep.sampler(interval_s=0.1).start()
        opened = threading.Event()
        results: list[list[list[str]]] = []
        t0 = time.monotonic()
        thread = threading.Thread(
            target=lambda: results.append(
                asyncio.run(_clients(f"http://127.0.0.1:{dep.port}", batch_id, clients, opened))
            ),
            daemon=True,
        )
        thread.start()
        wait_until(lambda: opened.is_set() or None, f"{clients} event streams open", 120)
        open_s = time.monotonic() - t0
        thread.join(timeout=900)
        sampler.stop()
        status = dep.client.status(batch_id)
        after_mb = _idle_rss(idle, 1.0)
    ids = results[0] if results else []
    ended = sum(1 for i in ids if i and i[-1].startswith(("COMPLETED", "FAILED", "CANCELLED")))
    api = sampler.report()["groups"]["api"]
    peak = sampler.peak_mb("api")
    return {
        "clients": clients,
        "files": files,
        "status": status["status"],
        "streams_open_s": round(open_s, 2),
        "batch_s": round(sampler.elapsed, 2),
        "clients_saw_end": ended,
        "events_per_client_mean": round(sum(len(i) for i in ids) / max(1, len(ids)), 1),
        "idle_mb": round(idle_mb, 1),
        "peak_mb": round(peak, 1),
        "delta_mb": round(peak - idle_mb, 1),
        "after_mb": round(after_mb, 1),
        "api_cpu_s": round(api["cpu_main_s"], 2),
        "limit_mb": LIMIT_MB,
        "met": peak - idle_mb <= LIMIT_MB and ended == clients,
        "resources": sampler.report(),
    }


def line(r: dict[str, Any]) -> str:
    return (
        f"SSE: {r['clients']} streams on one API process during a {r['files']}-PDF batch"
        f" ({r['batch_s']} s): API RSS {r['idle_mb']} -> {r['peak_mb']} MB"
        f" (+{r['delta_mb']} MB, limit +{r['limit_mb']}), API CPU {r['api_cpu_s']} s,"
        f" {r['clients_saw_end']}/{r['clients']} clients saw the end,"
        f" {r['events_per_client_mean']} events each"
    )
