"""Fixtures against real services: Redis, PostgreSQL and an S3 server started by `make test`."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

import asyncpg
import boto3
import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.postgres.schema import migrate
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import Corpus, Mix, build_corpus, seed_users, write_zip
from tests.support.helpers import ACME_TOKEN, GLOBEX_TOKEN, MakeCorpus, RunWorker
from tests.support.podsmode import pods_mode

REQUIRED_ENV = ("PDFQUEUE_REDIS_URL", "PDFQUEUE_DATABASE_URL", "PDFQUEUE_S3_ENDPOINT_URL")

# kubefix: the session-wide Kubernetes control plane (fixture `kube_cluster`), shared by every
# test module; kube_env: PdfBatches and the operator; browser: the API on a real port, and
# headless Chromium; tenants: clients of tenants of their own, with their own quotas.
pytest_plugins = [
    "tests.support.kubefix",
    "tests.support.kube_env",
    "tests.support.browser",
    "tests.support.tenants",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--e2e", action="store_true", help="run e2e tests against a kind cluster")
    parser.addoption(
        "--pods",
        action="store_true",
        help="require the real-pod tests: fail, not skip, where containers cannot run",
    )
    parser.addoption(
        "--no-pods", action="store_true", help="skip the real-pod tests (or PDFQUEUE_PODS=0)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--e2e"):
        skip = pytest.mark.skip(reason="e2e tests are opt-in: pass --e2e")
        for item in items:
            if "e2e" in item.keywords:
                item.add_marker(skip)
    if pods_mode(config) == "off":
        skip = pytest.mark.skip(reason="real-pod tests turned off (--no-pods or PDFQUEUE_PODS=0)")
        for item in items:
            if item.get_closest_marker("pods"):
                item.add_marker(skip)
    # the slow ones run last
    items.sort(key=lambda item: "e2e" in item.keywords or bool(item.get_closest_marker("pods")))


@pytest.fixture(scope="session")
def services() -> dict[str, str]:
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        pytest.exit(
            f"{', '.join(missing)} not set: run `make test`, or start the services with "
            '`tools/services.sh start .state` and `eval "$(tools/services.sh env .state)"`',
            returncode=2,
        )
    return {name: os.environ[name] for name in REQUIRED_ENV}


@pytest.fixture(scope="session")
async def migrated(services: dict[str, str]) -> None:
    """The database migrated and the tests' bucket there, as `pdfqueue migrate` leaves them:
    a test that uploads without the `storage` fixture must not be the first to need it."""
    pool = await connect(services["PDFQUEUE_DATABASE_URL"], max_size=1)
    async with pool.acquire() as conn:
        await migrate(conn)
    await pool.close()
    store = Storage.from_settings(Settings(storage_url="s3://pdfqueue/"))
    await store.ensure_bucket()
    await store.aclose()


@pytest.fixture
def settings(services: dict[str, str], migrated: None, request: pytest.FixtureRequest) -> Settings:
    """Settings isolated per test: own queue, own users table, own storage prefix."""
    tag = uuid.uuid4().hex[:10]
    overrides: dict[str, Any] = {
        "queue_name": f"pdfqueue-test:{tag}",
        "users_table": f"users_{tag}",
        "storage_url": f"s3://pdfqueue/t-{tag}",
        "worker_poll_delay_s": 0.01,
        "extract_processes": 2,
        "worker_max_jobs": 4,  # what the timings and fairness figures in docs/ were taken at
        "job_timeout_s": 20,
        "job_completion_wait_s": 30,
        "retry_base_delay_s": 0.05,
        "retry_max_delay_s": 0.2,
        # acme's token is stored in clear, globex's only as its hash
        "api_tokens": f"acme:{ACME_TOKEN},globex:sha256:{sha256(GLOBEX_TOKEN.encode()).hexdigest()}",
        # acme's report names users (the pipeline tests compare them); globex's does not
        "trusted_tenants": "acme",
        # every test shares one database and these tenants: the quota tests set their own
        "quota_uploads_per_minute": 0,
        "quota_bytes_per_day": 0,
        "quota_concurrent_batches": 0,
        "quota_retries_per_hour": 0,
    }
    marker = request.node.get_closest_marker("settings")
    if marker:
        overrides.update(marker.kwargs)
    return Settings(**overrides)


@pytest.fixture
async def storage(settings: Settings) -> AsyncIterator[Storage]:
    store = Storage.from_settings(settings, threads=4)
    await store.ensure_bucket()
    yield store
    await store.aclose()


@pytest.fixture
def s3_keys(settings: Settings) -> Callable[[str], list[str]]:
    """List what really is in the bucket under this test's prefix (to prove nothing is left)."""
    client = boto3.client(
        "s3", endpoint_url=os.environ["PDFQUEUE_S3_ENDPOINT_URL"], region_name="us-east-1"
    )
    prefix = settings.storage_url.removeprefix("s3://pdfqueue/") + "/"

    def list_keys(under: str = "") -> list[str]:
        found = client.list_objects_v2(Bucket="pdfqueue", Prefix=prefix + under)
        keys = [o["Key"].removeprefix(prefix) for o in found.get("Contents", [])]
        uploads = client.list_multipart_uploads(Bucket="pdfqueue", Prefix=prefix + under)
        keys += [f"(multipart) {u['Key']}" for u in uploads.get("Uploads", [])]
        return keys

    return list_keys


@pytest.fixture
async def redis(settings: Settings) -> AsyncIterator[Redis]:
    client = Redis.from_url(settings.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(settings.database_url)
    yield conn
    await conn.execute(f'DROP TABLE IF EXISTS "{settings.users_table}"')
    await conn.close()


@pytest.fixture
def make_corpus(db: asyncpg.Connection, settings: Settings, tmp_path: Path) -> MakeCorpus:
    """Build a corpus, seed its users into this test's users table, and write its ZIP."""

    async def make(
        n: int, *, seed: int = 0, mix: Mix | None = None, junk: bool = True
    ) -> tuple[Corpus, Path]:
        corpus = build_corpus(n, seed=seed, **({"mix": mix} if mix else {}))
        await seed_users(db, corpus.users, table=settings.users_table)
        path = write_zip(corpus, tmp_path / f"corpus-{n}-{seed}.zip", seed=seed, junk=junk)
        return corpus, path

    return make


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real ASGI app, lifespan included, with tenant acme's token."""
    from pdfqueue_api.app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://pdfqueue.test",
            headers={"Authorization": f"Bearer {ACME_TOKEN}"},
            timeout=30,
        ) as client:
            yield client


@pytest.fixture
def run_worker(settings: Settings) -> RunWorker:
    """Run a real arq worker in burst mode until the queue is empty (arq's own test pattern)."""
    from pdfqueue_worker.app import build_worker

    async def run(**overrides: Any) -> Any:
        worker = build_worker(settings, burst=True, handle_signals=False, **overrides)
        try:
            await worker.main()
        finally:
            await worker.close()
        return worker

    return run
