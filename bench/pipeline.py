"""pdfqueue end to end: the API and workers as `uv run` subprocesses, one timed batch each."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import secrets
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import httpx
from redis import Redis

from bench import corpus
from bench.procs import Sampler, listener_pid
from pdfqueue.cli.client import Client
from pdfqueue.domain import keys
from pdfqueue.domain.models import TERMINAL
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.provision import provision
from pdfqueue.stores.postgres.pool import connect
from pdfqueue_dev.corpora.documents import Density
from pdfqueue_dev.processes import Child, free_port, free_ports, stop_all, wait_http, wait_until

REQUIRED = ("PDFQUEUE_REDIS_URL", "PDFQUEUE_DATABASE_URL", "PDFQUEUE_S3_ENDPOINT_URL")
TOKEN = secrets.token_urlsafe(32)
"""A fresh token per run: the API refuses tokens under 32 characters."""
POLL_S = 0.05
"""How often the bench asks for the batch status (the peer's driver polls every 20 ms)."""
WARMUP_FILES = 40
UV = os.environ.get("UV") or "uv"
"""`uv run` sets UV to itself; the Makefile puts uv's folder on PATH."""


@dataclass
class Bench:
    """What every run shares: the environment for children, names, and what to clean up."""

    run_id: str
    log_dir: Path
    env: dict[str, str]
    bucket: str
    batches: list[str] = field(default_factory=list)
    services: dict[str, int] = field(default_factory=dict)
    """pid of Redis, PostgreSQL and the S3 server (their listeners), for CPU accounting."""

    @classmethod
    def from_environ(cls, run_id: str, log_dir: Path) -> Bench:
        missing = [k for k in REQUIRED if not os.environ.get(k)]
        if missing:
            raise SystemExit(
                f"{', '.join(missing)} not set: run `make bench`, or start the services and"
                ' `eval "$(bash tools/services.sh env .state)"` first'
            )
        storage = urlparse(os.environ.get("PDFQUEUE_STORAGE_URL", "s3://pdfqueue/"))
        bucket = storage.netloc if storage.scheme == "s3" else "pdfqueue"
        env = {
            **os.environ,
            "PDFQUEUE_STORAGE_URL": f"s3://{bucket}/bench-{run_id}",
            "PDFQUEUE_USERS_TABLE": f"bench_{run_id}.{corpus.USERS_TABLE}",
            "PDFQUEUE_QUEUE_NAME": f"pdfqueue:bench-{run_id}",
            "PDFQUEUE_API_TOKENS": f"bench:{TOKEN}",
            "PDFQUEUE_METRICS_PORT": "0",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_SDK_DISABLED": "true",
        }
        log_dir.mkdir(parents=True, exist_ok=True)
        ports = {
            "redis": urlparse(env["PDFQUEUE_REDIS_URL"]).port or 6379,
            "postgres": urlparse(env["PDFQUEUE_DATABASE_URL"]).port or 5432,
            "s3": urlparse(env["PDFQUEUE_S3_ENDPOINT_URL"]).port or 80,
        }
        services = {name: pid for name, port in ports.items() if (pid := listener_pid(port))}
        return cls(run_id, log_dir, env, bucket, services=services)

    @property
    def database_url(self) -> str:
        return self.env["PDFQUEUE_DATABASE_URL"]

    @property
    def schema(self) -> str:
        """This run's own PostgreSQL schema, holding its `users` table; dropped at the end."""
        return f"bench_{self.run_id}"

    @property
    def prefix(self) -> str:
        return f"bench-{self.run_id}/"

    def redis(self) -> Redis:
        return Redis.from_url(self.env["PDFQUEUE_REDIS_URL"])

    def s3(self) -> Any:
        return boto3.client(
            "s3", endpoint_url=self.env["PDFQUEUE_S3_ENDPOINT_URL"], region_name="us-east-1"
        )

    async def prepare(self) -> None:
        """Migrations and the bucket, as `pdfqueue migrate` would."""
        await provision(
            Settings(database_url=self.database_url, storage_url=self.env["PDFQUEUE_STORAGE_URL"])
        )

    async def cleanup(self) -> None:
        """Remove what this run created: objects under its prefix, its batches, its queues."""
        s3 = self.s3()
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        for page in pages:
            found = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            for i in range(0, len(found), 1000):
                s3.delete_objects(Bucket=self.bucket, Delete={"Objects": found[i : i + 1000]})
        uploads = s3.list_multipart_uploads(Bucket=self.bucket, Prefix=self.prefix)
        for u in uploads.get("Uploads", []):
            s3.abort_multipart_upload(Bucket=self.bucket, Key=u["Key"], UploadId=u["UploadId"])
        pool = await connect(self.database_url, max_size=1)
        await pool.execute("DELETE FROM pdfqueue_batches WHERE id = ANY($1)", self.batches)
        await pool.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        await pool.close()
        with self.redis() as r:
            mine = set(self.batches)
            for key in r.scan_iter(match="arq:result:*", count=1000):
                parts = key.decode().split(":")  # arq:result:process:<batch>:<index>
                if len(parts) > 3 and parts[3] in mine:
                    r.delete(key)
            for batch_id in self.batches:
                r.delete(keys.batch(batch_id), keys.outcomes(batch_id))
            for key in r.scan_iter(match=f"pdfqueue:bench-{self.run_id}*", count=1000):
                r.delete(key)


def _metrics(port: int) -> dict[str, float]:
    """The stage and job histograms' sums and counts from one worker's /metrics."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return {}
    out = {}
    pattern = r"^(pdfqueue_(?:stage|job)_duration_seconds_(?:sum|count))\{([^}]*)\} (\S+)$"
    for m in re.finditer(pattern, text, re.M):
        out[f"{m.group(1)}{{{m.group(2)}}}"] = float(m.group(3))
    return out


def _stage_means(before: list[dict[str, float]], after: list[dict[str, float]]) -> dict[str, Any]:
    """Mean milliseconds per stage (and per process job) over the timed batch, all workers."""
    totals: dict[str, float] = {}
    for b, a in zip(before, after, strict=True):
        for k, v in a.items():
            totals[k] = totals.get(k, 0.0) + v - b.get(k, 0.0)
    means = {}
    for k, total in totals.items():
        if "_sum{" not in k:
            continue
        count = totals.get(k.replace("_sum{", "_count{"), 0.0)
        if count:
            label = re.search(r'(?:stage|function)="([^"]+)"', k)
            result = re.search(r'result="([^"]+)"', k)
            name = (label.group(1) if label else k) + (f"/{result.group(1)}" if result else "")
            means[name] = {"mean_ms": round(1000 * total / count, 2), "count": int(count)}
    return means


class Deployment:
    """The API and N workers for one configuration, started fresh and warmed up."""

    def __init__(
        self,
        bench: Bench,
        workers: int,
        extract_processes: int,
        tag: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.bench = bench
        self.env = env or {}
        """Settings of this configuration only, over the bench's own."""
        self.workers = workers
        self.extract_processes = extract_processes
        self.tag = tag
        self.port = free_port()
        self.metrics_ports = free_ports(workers)
        self.children: list[Child] = []
        self.client = Client(f"http://127.0.0.1:{self.port}", TOKEN, timeout_s=120)

    def __enter__(self) -> Deployment:
        env = {
            **self.bench.env,
            "PDFQUEUE_EXTRACT_PROCESSES": str(self.extract_processes),
            **self.env,
        }
        try:
            self.children.append(
                Child(
                    f"{self.tag}-api",
                    [UV, "run", "--no-sync", "pdfqueue", "api", "--port", str(self.port)],
                    env,
                    self.bench.log_dir,
                    launcher=True,
                )
            )
            for i, mport in enumerate(self.metrics_ports):
                self.children.append(
                    Child(
                        f"{self.tag}-worker-{i + 1}",
                        [UV, "run", "--no-sync", "pdfqueue", "worker"],
                        {**env, "PDFQUEUE_METRICS_PORT": str(mport)},
                        self.bench.log_dir,
                        launcher=True,
                    )
                )
            self._wait_ready()
        except BaseException:
            stop_all(self.children)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        stop_all(self.children)

    @property
    def api(self) -> Child:
        return self.children[0]

    @property
    def worker_children(self) -> list[Child]:
        return self.children[1:]

    def _check_alive(self) -> None:
        for child in self.children:
            child.check_alive()

    def _worker_ready(self, child: Child, port: int) -> bool:
        """Started (arq logged it) and, where /metrics answers, past its startup hook."""
        self._check_alive()
        if "Starting worker" not in child.log_tail(400):
            return False
        try:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return True  # no metrics endpoint: arq's own log line has to do
        m = re.search(r"^pdfqueue_worker_max_jobs (\S+)$", text, re.M)
        return m is None or float(m.group(1)) > 0

    def _wait_ready(self) -> None:
        wait_http(f"http://127.0.0.1:{self.port}/readyz", self.children, timeout_s=60)
        for child, port in zip(self.worker_children, self.metrics_ports, strict=True):
            ready = functools.partial(self._worker_ready, child, port)
            wait_until(ready, f"{child.name} ready", 60)

    def sampler(self, interval_s: float = 0.2) -> Sampler:
        s = Sampler(interval_s, services=self.bench.services)
        s.watch("api", self.api.main_pid)
        for w in self.worker_children:
            s.watch(w.name.removeprefix(f"{self.tag}-"), w.main_pid)
        return s

    def warm_up(self) -> None:
        """One small batch first: parsing pools start lazily, imports are paid once."""
        planned, path = corpus.corpus(WARMUP_FILES, corpus.WARMUP_SEED)
        asyncio.run(corpus.reseed(self.bench.database_url, self.bench.schema, planned))
        result = self.batch(path, timeout_s=120)
        if result["status"] != "COMPLETED":
            raise RuntimeError(f"warm-up batch ended {result['status']}: {result}")

    def batch(self, path: Path, timeout_s: float) -> dict[str, Any]:
        """Upload `path`, follow the batch to a terminal status; wall times from upload start."""
        t0, epoch0 = time.monotonic(), time.time()
        created = self.client.upload(path)
        uploaded = time.monotonic() - t0
        batch_id = created["batch_id"]
        self.bench.batches.append(batch_id)
        status: dict[str, Any] = {"status": "?"}
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            status = self.client.status(batch_id)
            if status["status"] in TERMINAL:
                break
            self._check_alive()
            time.sleep(POLL_S)
        else:
            status = {**status, "status": f"TIMEOUT({status['status']})"}
        return {
            "batch_id": batch_id,
            "seconds": time.monotonic() - t0,
            "upload_s": uploaded,
            "epoch0": epoch0,
            **status,
        }

    def timed(self, path: Path, n: int, timeout_s: float) -> dict[str, Any]:
        """The measured batch, with RSS/CPU sampling, stage means and arq's job timings."""
        before = [_metrics(p) for p in self.metrics_ports]
        sampler = self.sampler().start()
        try:
            result = self.batch(path, timeout_s)
        finally:
            sampler.stop()
        time.sleep(0.5)  # arq stores the last job's result just after the batch completes
        after = [_metrics(p) for p in self.metrics_ports]
        result["stages"] = _stage_means(before, after)
        result["jobs"] = arq_timings(self.bench, result["batch_id"], result["epoch0"])
        result["resources"] = sampler.report()
        linked_db, _ = asyncio.run(corpus.linked_in_db(self.bench.database_url, self.bench.schema))
        result["linked_in_db"] = linked_db
        result["files"] = n
        return result


def arq_timings(bench: Bench, batch_id: str, epoch0: float) -> dict[str, Any]:
    """From arq's stored results: job durations, tries, and the busy window (then delete them)."""
    with bench.redis() as r:
        keys = list(r.scan_iter(match=f"arq:result:*{batch_id}*", count=2000))
        results = []
        for i in range(0, len(keys), 500):
            results += [json.loads(v) for v in r.mget(keys[i : i + 500]) if v]
        for i in range(0, len(keys), 500):
            r.delete(*keys[i : i + 500])
    procs = [x for x in results if x.get("f") == "process"]
    ingest = next((x for x in results if x.get("f") == "ingest"), None)
    if not procs:
        return {}
    durations = [x["ft"] - x["st"] for x in procs]
    first, last = min(x["st"] for x in procs), max(x["ft"] for x in procs)
    window = max(1, last - first)
    return {
        "process_jobs": len(procs),
        "retried_jobs": sum(1 for x in procs if x.get("t", 1) > 1),
        "job_mean_ms": round(statistics.fmean(durations), 1),
        "job_p50_ms": round(statistics.median(durations), 1),
        "job_max_ms": max(durations),
        "mean_in_flight": round(sum(durations) / window, 1),
        "ingest_ms": (ingest["ft"] - ingest["st"]) if ingest else None,
        "first_process_start_s": round(first / 1000 - epoch0, 3),
        "last_process_end_s": round(last / 1000 - epoch0, 3),
    }


def run_config(
    bench: Bench,
    workers: int,
    extract_processes: int,
    n: int,
    *,
    seed: int,
    timeout_s: float,
    density: Density = Density.SPARSE,
) -> dict[str, Any]:
    """Start a fresh deployment, warm it up, reseed, and time one batch of n clean PDFs."""
    planned, path = corpus.corpus(n, seed, density)
    tag = f"pq-{density}-{n}-w{workers}-p{extract_processes}"
    with Deployment(bench, workers, extract_processes, tag) as dep:
        dep.warm_up()
        asyncio.run(corpus.reseed(bench.database_url, bench.schema, planned))
        result = dep.timed(path, n, timeout_s)
    result.update(system="pdfqueue", workers=workers, extract_processes=extract_processes)
    return result
