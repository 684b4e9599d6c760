"""The fault-injection harness: private services, real worker processes, invariant checks."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from pdfqueue.domain.models import COUNTERS
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import Corpus, Expect, Mix, build_corpus, seed_users, write_zip
from pdfqueue_dev.processes import Child, free_ports, wait_until_async

ROOT = Path(__file__).parents[2]
SERVICES = ROOT / "tools" / "services.sh"
PORT_VARS = ("PDFQUEUE_REDIS_PORT", "PDFQUEUE_PG_PORT", "PDFQUEUE_S3_PORT")
# Short timeouts make a SIGKILLed worker's jobs come back in 20 s (job timeout + 5 + 10 s).
FAST = {
    "PDFQUEUE_JOB_TIMEOUT_S": "5",
    "PDFQUEUE_JOB_COMPLETION_WAIT_S": "11",
    "PDFQUEUE_EXTRACT_TIMEOUT_S": "4",
    "PDFQUEUE_EXTRACT_PROCESSES": "1",
    "PDFQUEUE_WORKER_MAX_JOBS": "8",
    "PDFQUEUE_PDFS_PER_JOB": "5",  # more, smaller jobs: more ways for a fault to cut one
    "PDFQUEUE_WORKER_POLL_DELAY_S": "0.02",
    "PDFQUEUE_RETRY_BASE_DELAY_S": "0.5",
    "PDFQUEUE_RETRY_MAX_DELAY_S": "4",
    "PDFQUEUE_METRICS_PORT": "0",
}


@dataclass(frozen=True)
class Services:
    """Private Redis, PostgreSQL and S3 on free ports: stopping them disturbs no other test."""

    state: Path
    ports: dict[str, str]

    @classmethod
    def allocate(cls, state: Path) -> Services:
        ports = free_ports(len(PORT_VARS))
        return cls(state, {v: str(port) for v, port in zip(PORT_VARS, ports, strict=True)})

    def run(self, command: str, *extra: str) -> str:
        return subprocess.run(
            ["bash", str(SERVICES), command, str(self.state), *extra],
            env={**os.environ, **self.ports},
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout

    def env(self) -> dict[str, str]:
        lines = self.run("env").splitlines()
        return dict(line.removeprefix("export ").split("=", 1) for line in lines if "=" in line)


@dataclass
class Run:
    """One batch under fault: its own queue, users table and storage prefix."""

    env: dict[str, str]
    corpus: Corpus
    batch_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    workers: list[Child] = field(default_factory=list)
    logs: Path = field(default_factory=Path)
    zip_path: Path = field(default_factory=Path)

    @property
    def settings(self) -> Settings:
        return Settings(
            **{
                k.removeprefix("PDFQUEUE_").lower(): v
                for k, v in self.env.items()
                if k.startswith("PDFQUEUE_") and k not in PORT_VARS
            }
        )

    def start_worker(self) -> Child:
        """A worker in its own process group, like a pod."""
        argv = [sys.executable, "-m", "pdfqueue.cli.main", "worker"]
        name = f"worker-{self.zip_path.stem}-{len(self.workers)}"  # runs may share `logs`
        worker = Child(name, argv, {**os.environ, **self.env}, self.logs)
        self.workers.append(worker)
        return worker

    def stop_all(self) -> None:
        for worker in self.workers:
            worker.kill9()

    async def wait_until(
        self, what: str, condition: Callable[[dict[str, Any]], bool], timeout_s: float
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        async def reached() -> dict[str, Any] | None:
            seen.update(await self.summary())
            return dict(seen) if seen and condition(seen) else None

        return await wait_until_async(
            reached,
            f"batch {self.batch_id} {what}",
            timeout_s,
            interval_s=0.3,
            diagnostics=lambda: f"its summary: {seen}{self._exited()}",
        )

    def _exited(self) -> str:
        gone = [w for w in self.workers if not w.alive()]
        return "".join(f"\n{w.name} exited:\n{w.log_tail(20)}" for w in gone)

    async def summary(self) -> dict[str, Any]:
        conn = await asyncpg.connect(self.env["PDFQUEUE_DATABASE_URL"])
        try:
            row = await conn.fetchrow("SELECT * FROM pdfqueue_batches WHERE id = $1", self.batch_id)
            if row is None:
                return {}
            # The row's counters are written when the batch ends; live progress is the files.
            done = await conn.fetchval(
                "SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1 AND outcome <> 'ignored'",
                self.batch_id,
            )
            return {**dict(row), "processed": done}
        finally:
            await conn.close()


@pytest.fixture(scope="module")
def fault_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """The module's private services (a test module imports this fixture by name)."""
    svc = Services.allocate(tmp_path_factory.mktemp("fault-services"))
    svc.run("start")
    # `start` accepts anything already answering on a port; these must be ours to stop.
    assert (svc.state / "redis.pid").exists(), f"another Redis holds port {svc.ports}"
    assert (svc.state / "versitygw.pid").exists(), f"another S3 server holds port {svc.ports}"
    yield svc
    svc.run("destroy")


@pytest.fixture
async def run_factory(
    fault_services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Awaitable[Run]]]:
    """`make(n, seed, **prepare's options)`: a prepared Run on the private services."""
    from pdfqueue.stores.postgres.schema import migrate

    env = fault_services.env()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])  # boto3 in this process reads them from here
    pool = await connect(env["PDFQUEUE_DATABASE_URL"], max_size=1)
    async with pool.acquire() as conn:
        await migrate(conn)
    await pool.close()
    runs: list[Run] = []

    async def make(n: int, seed: int, **options: Any) -> Run:
        run = await prepare(env, n, seed, tmp_path, **options)
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.stop_all()


async def prepare(
    env: dict[str, str],
    n: int,
    seed: int,
    logs: Path,
    *,
    register: bool = True,
    tenant: str = "faults",
    pdfbatch_uid: str | None = None,
) -> Run:
    """Seed users, store the ZIP and register the batch, as the API would (with
    `pdfbatch_uid`: as the operator does for a PdfBatch, its ZIP under the operator's folder;
    not `register`: only the ZIP written, for an upload through the API)."""
    tag = uuid.uuid4().hex[:10]
    env = {
        **env,
        **FAST,
        "PDFQUEUE_QUEUE_NAME": f"faults:{tag}",
        "PDFQUEUE_USERS_TABLE": f"users_{tag}",
        "PDFQUEUE_STORAGE_URL": f"s3://pdfqueue/f-{tag}",
    }
    run = Run(env, build_corpus(n, seed=seed, mix=Mix()), logs=logs)
    if pdfbatch_uid is not None:
        run.batch_id = pdfbatch_uid.replace("-", "")  # the operator's `PdfBatchObject.own_id`
    settings = run.settings
    zip_path = run.zip_path = write_zip(run.corpus, logs / f"{tag}.zip", seed=seed)
    conn = await asyncpg.connect(settings.database_url)
    await seed_users(conn, run.corpus.users, table=settings.users_table)
    await conn.close()
    if not register:
        return run
    source = f"uploads/{run.batch_id}.zip"
    if pdfbatch_uid is not None:
        source = f"{settings.operator_source_prefix}{tenant}/{tag}.zip"
    storage = Storage.from_settings(settings, threads=2)
    await storage.ensure_bucket()
    await storage.put(source, zip_path.read_bytes())
    await storage.aclose()
    pool = await connect(settings.database_url, max_size=2)
    from redis.asyncio import Redis

    redis = Redis.from_url(settings.redis_url)
    await lifecycle_over(pool, redis, settings).register(
        batch_id=run.batch_id,
        tenant=tenant,
        source_key=source,
        pdfbatch_uid=pdfbatch_uid,
    )
    await redis.aclose()
    await pool.close()
    return run


async def check_invariants(run: Run) -> None:
    """Every file one outcome; Redis equals PostgreSQL; no user linked twice; no stray object."""
    s = run.settings
    from redis.asyncio import Redis

    from pdfqueue.domain import keys

    conn = await asyncpg.connect(s.database_url)
    redis = Redis.from_url(s.redis_url)
    storage = Storage.from_settings(s, threads=2)
    try:
        batch = await conn.fetchrow("SELECT * FROM pdfqueue_batches WHERE id = $1", run.batch_id)
        assert batch["status"] == "COMPLETED", dict(batch)
        files = await conn.fetch(
            "SELECT idx, name, outcome, reason, user_id, object_key FROM pdfqueue_files"
            " WHERE batch_id = $1 AND outcome <> 'ignored'",
            run.batch_id,
        )
        assert len(files) == len(run.corpus.files) == batch["total_files"] == batch["processed"]
        by_name = {f["name"]: f for f in files}
        for f in run.corpus.files:  # nothing transient leaked into an outcome
            assert by_name[f.name]["outcome"] == f.expect.value, (f, dict(by_name[f.name]))
        counted = {c: sum(1 for f in files if f["outcome"] == c) for c in COUNTERS}
        assert {c: batch[c] for c in COUNTERS} == counted
        assert {c: counted[c] for c in run.corpus.counts()} == run.corpus.counts()
        assert sum(counted.values()) == len(run.corpus.files)  # none in a counter it has not
        live = await redis.hgetall(keys.batch(run.batch_id))
        if live:  # Redis equals the per-file table
            assert {c: int(live[c.encode()]) for c in COUNTERS} == counted
            assert len(await redis.hgetall(keys.outcomes(run.batch_id))) == len(files)
        links = await conn.fetch(
            f'SELECT id, pdf_url FROM "{s.users_table}" WHERE pdf_url IS NOT NULL'
        )
        legacy = {u.id for u in run.corpus.users if u.pdf_url}
        linked_rows = [f for f in files if f["outcome"] == "linked"]
        assert len({f["user_id"] for f in linked_rows}) == len(linked_rows)  # each user once
        ours = {r["id"]: r["pdf_url"] for r in links if r["id"] not in legacy}
        assert ours == {f["user_id"]: f["object_key"] for f in linked_rows}
        stored = await storage.run(_list_keys, storage, "pdfs/")
        assert sorted(stored) == sorted(ours.values())  # no object outside the links
        assert sum(1 for f in run.corpus.files if f.expect is Expect.LINKED) == len(linked_rows)
    finally:
        await storage.aclose()
        await redis.aclose()
        await conn.close()


def _list_keys(storage: Storage, prefix: str) -> list[str]:
    backend = storage.backend
    found = backend.client.list_objects_v2(  # type: ignore[attr-defined]
        Bucket=backend.location.bucket,
        Prefix=backend.location.prefix + prefix,  # type: ignore[attr-defined]
    )
    return [o["Key"].removeprefix(backend.location.prefix) for o in found.get("Contents", [])]  # type: ignore[attr-defined]


async def outage(services: Services, service: str, seconds: float) -> None:
    """Stop one private service for `seconds`, then start it again."""
    await asyncio.to_thread(services.run, "stop", "--only", service)
    try:
        await asyncio.sleep(seconds)
    finally:
        await asyncio.to_thread(services.run, "start", "--only", service)


async def lose_redis(services: Services) -> None:
    """Redis dies without saving (SIGKILL) and comes back empty: its AOF and RDB deleted, as
    on a new volume or after a failover that lost the last writes."""
    import shutil
    import signal

    pid = int((services.state / "redis.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    await wait_until_async(lambda: None if _alive(pid) else True, "redis to die", 10)
    data = services.state / "redis"
    for path in data.iterdir():  # appendonlydir/ (AOF), dump.rdb
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    await asyncio.to_thread(services.run, "start", "--only", "redis")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split()[2] != "Z"
