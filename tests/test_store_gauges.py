"""pdfqueue_postgres_up, pdfqueue_storage_up and pdfqueue_batch_oldest_progress_age_seconds on
the real stores.

The age is what PdfqueueBatchStuck alerts on: it grows while a PROCESSING batch's count stays
still, restarts when a file is counted, ignores a batch whose live state vanished (that is no
progress), and forgets a batch once it is finished.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pdfqueue.domain import keys
from pdfqueue.domain.models import BatchStatus, Decision, FileRef, Outcome
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.runtime.connections import API, Stores
from pdfqueue.runtime.store_gauges import StoreGauges
from pdfqueue.stores.postgres.batches import BatchStore
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.postgres.schema import migrate
from pdfqueue.stores.storage import Storage
from pdfqueue.stores.storage.local import FileBackend
from pdfqueue_dev.processes import wait_until_async
from tests.support.faults import Services


@pytest.fixture
async def stores(settings: Settings) -> AsyncIterator[Stores]:
    opened = await Stores.open(settings, API)
    yield opened
    await opened.close()


def sample(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


async def running_batch(stores: Stores, files: int) -> str:
    """A batch that ingest has started: PROCESSING in PostgreSQL, counting in Redis."""
    batch_id = uuid.uuid4().hex
    await stores.lifecycle.register(
        batch_id=batch_id, tenant="acme", source_key=keys.upload(batch_id)
    )
    assert await stores.lifecycle.start(batch_id, files, []) is BatchStatus.PROCESSING
    return batch_id


async def count_one(stores: Stores, batch_id: str, index: int) -> None:
    ref = FileRef(batch_id, index, f"{index}.pdf")
    await stores.lifecycle.record(batch_id, {ref: Decision(Outcome.SKIPPED_NO_MATCH, "no_user")})


async def test_the_age_of_the_stalest_batch_follows_its_count(stores: Stores) -> None:
    gauges = StoreGauges(stores.redis, stores.batches)
    metrics.register("postgres")
    ours = await running_batch(stores, 3)

    await gauges.poll(now=100.0)
    assert gauges.clock.moved_at(ours) == 100.0
    assert sample("pdfqueue_batch_oldest_progress_age_seconds") == 0.0
    # nothing counted: every running batch, first seen at 100, has been still for 60 s
    await gauges.poll(now=160.0)
    assert sample("pdfqueue_batch_oldest_progress_age_seconds") == 60.0

    await count_one(stores, ours, 0)
    await gauges.poll(now=200.0)
    assert gauges.clock.moved_at(ours) == 200.0

    # Redis lost the batch's live state: no count is no progress, the age keeps growing
    await stores.redis.delete(keys.batch(ours))
    await gauges.poll(now=260.0)
    assert gauges.clock.moved_at(ours) == 200.0
    await gauges.poll(now=1300.0)
    assert gauges.clock.moved_at(ours) == 200.0
    # at least ours; batches other tests left PROCESSING in the shared database count too
    assert (sample("pdfqueue_batch_oldest_progress_age_seconds") or 0) >= 1100.0

    # finished, it is no longer watched
    await stores.batches.finish(ours, BatchStatus.COMPLETED)
    await gauges.poll(now=1400.0)
    assert gauges.clock.moved_at(ours) is None


async def gauge_follows_an_outage(
    services: Services, service: str, gauge: str, *, unaffected: str | None = None
) -> None:
    """`gauge` reads 1, then 0 while the private `service` is stopped, then 1 once it is back;
    `unaffected` stays 1 throughout the outage."""

    def up_is(value: float) -> bool:
        return sample(gauge) == value

    await wait_until_async(lambda: up_is(1.0), f"{gauge} 1", 30)
    services.run("stop", "--only", service)
    await wait_until_async(lambda: up_is(0.0), f"{gauge} 0", 30)
    if unaffected is not None:
        assert sample(unaffected) == 1.0
    services.run("start", "--only", service)
    await wait_until_async(lambda: up_is(1.0), f"{gauge} 1 again", 60)


@pytest.mark.timeout(300)
async def test_postgres_up_follows_a_real_outage(settings: Settings, tmp_path: Path) -> None:
    """A private PostgreSQL, stopped and started again under a running StoreGauges."""
    services = Services.allocate(tmp_path / "services")
    services.run("start", "--only", "postgres")
    stores = await Stores.open(settings, API)
    pool = await connect(services.env()["PDFQUEUE_DATABASE_URL"], max_size=2)
    gauges = StoreGauges(stores.redis, BatchStore(pool), interval_s=0.2)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        gauges.start()
        await gauge_follows_an_outage(services, "postgres", "pdfqueue_postgres_up")
    finally:
        await gauges.stop()
        await pool.close()
        await stores.close()
        services.run("destroy")


@pytest.mark.timeout(300)
async def test_storage_up_follows_a_real_s3_outage(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private S3 server, stopped and started again under a running StoreGauges."""
    services = Services.allocate(tmp_path / "services")
    services.run("start", "--only", "s3")
    env = services.env()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])
    private = settings.model_copy(
        update={
            "storage_url": env["PDFQUEUE_STORAGE_URL"],
            "s3_endpoint_url": env["PDFQUEUE_S3_ENDPOINT_URL"],
        }
    )
    stores = await Stores.open(settings, API)
    storage = Storage.from_settings(private, threads=2)
    gauges = StoreGauges(stores.redis, stores.batches, interval_s=0.2, storage=storage)
    try:
        await storage.ensure_bucket()
        gauges.start()
        # its own loop: PostgreSQL's gauge stays up through the object store's outage
        await gauge_follows_an_outage(
            services, "s3", "pdfqueue_storage_up", unaffected="pdfqueue_postgres_up"
        )
    finally:
        await gauges.stop()
        await storage.aclose()
        await stores.close()
        services.run("destroy")


async def test_stop_ends_both_loops(stores: Stores, tmp_path: Path) -> None:
    """The storage check has a loop of its own; stop ends it with PostgreSQL's, and a second
    start after stop runs them again."""
    folder = tmp_path / "objects"
    folder.mkdir()
    storage = Storage(FileBackend(folder), threads=1)
    gauges = StoreGauges(stores.redis, stores.batches, interval_s=0.05, storage=storage)
    try:
        gauges.start()
        loops = list(gauges._loops)
        assert [loop.name for loop in loops] == ["store-gauges", "storage-gauge"]
        await wait_until_async(lambda: sample("pdfqueue_storage_up") == 1.0, "storage up", 30)
        folder.rmdir()
        await wait_until_async(lambda: sample("pdfqueue_storage_up") == 0.0, "storage down", 30)
        tasks = [loop._task for loop in loops]
        await gauges.stop()
        assert gauges._loops == []
        assert all(task is not None and task.done() for task in tasks)
        folder.mkdir()
        gauges.start()
        await wait_until_async(lambda: sample("pdfqueue_storage_up") == 1.0, "storage up again", 30)
    finally:
        await gauges.stop()
        await storage.aclose()
