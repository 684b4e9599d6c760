"""`pdfqueue admin` against the real stores: every tenant's batches, the stuck ones, a rebuild."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from pdfqueue.cli.main import EXIT_ERROR, EXIT_OK, main
from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.runtime.connections import STARTUP_WAIT_S, lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.redis.queue import remove
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import free_port
from tests.support.helpers import MakeCorpus, RunWorker


@pytest.fixture
async def lifecycle(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Lifecycle]:
    """The test's stores, and the environment the admin commands read them from."""
    monkeypatch.setenv("PDFQUEUE_QUEUE_NAME", settings.queue_name)
    monkeypatch.setenv("PDFQUEUE_USERS_TABLE", settings.users_table)
    pool = await connect(settings.database_url, max_size=2)
    redis = Redis.from_url(settings.redis_url)
    yield lifecycle_over(pool, redis, settings)
    await redis.aclose()
    await pool.close()


async def admin(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """The command in a thread (it runs its own event loop): (code, stdout, stderr)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["admin", *argv])
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


async def register(lifecycle: Lifecycle, tenant: str) -> str:
    batch_id = uuid.uuid4().hex
    await lifecycle.register(batch_id=batch_id, tenant=tenant, source_key=keys.upload(batch_id))
    return batch_id


async def test_batches_of_every_tenant_or_of_one(
    lifecycle: Lifecycle, capsys: pytest.CaptureFixture[str]
) -> None:
    tenant_a, tenant_b = f"a{uuid.uuid4().hex[:8]}", f"b{uuid.uuid4().hex[:8]}"
    first = await register(lifecycle, tenant_a)
    second = await register(lifecycle, tenant_b)
    code, out, _ = await admin(capsys, "batches", "--json", "--limit", "100")
    assert code == EXIT_OK
    listed = {b["batch_id"]: b for b in json.loads(out)}
    assert {first, second} <= set(listed)  # across tenants, with no token at all
    assert listed[second]["tenant"] == tenant_b
    assert listed[second]["status"] == "PENDING"
    code, out, _ = await admin(capsys, "batches", "--json", "--tenant", tenant_a)
    assert [b["batch_id"] for b in json.loads(out)] == [first]
    code, out, _ = await admin(capsys, "batches", "--tenant", tenant_a)
    assert code == EXIT_OK
    assert first in out  # whole, however narrow the terminal


async def test_stuck_batch_listed_then_requeued_and_completed(
    lifecycle: Lifecycle,
    settings: Settings,
    storage: Storage,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tenant = f"s{uuid.uuid4().hex[:8]}"
    corpus, path = await make_corpus(12, seed=31)
    batch_id = uuid.uuid4().hex
    await storage.put(keys.upload(batch_id), path.read_bytes())
    await lifecycle.register(batch_id=batch_id, tenant=tenant, source_key=keys.upload(batch_id))

    async def stuck() -> dict[str, list[str]]:
        code, out, _ = await admin(capsys, "batches", "--stuck", "--json", "--tenant", tenant)
        assert code == EXIT_OK
        return {b["batch_id"]: b["stuck"] for b in json.loads(out)}

    assert await stuck() == {}  # healthy: its ingest is queued
    code, out, _ = await admin(capsys, "requeue", batch_id)
    assert code == EXIT_OK
    assert "healthy" in out

    # Redis loses the batch: its live state and its queued ingest
    await lifecycle.redis.delete(keys.batch(batch_id))
    await remove(lifecycle.redis, settings.queue_name, [keys.ingest_job(batch_id)])
    assert await stuck() == {batch_id: ["live state missing", "no work queued"]}
    code, out, _ = await admin(capsys, "requeue", batch_id)
    assert code == EXIT_OK, out
    assert f"batch {batch_id} (tenant {tenant}) rebuilt: live state, ingest" in out
    assert await stuck() == {}
    code, out, _ = await admin(capsys, "requeue", batch_id, "--json")
    assert json.loads(out)["rebuilt"] == []  # a second run finds it healthy

    await run_worker()
    found = await lifecycle.reads.read(batch_id)
    assert found is not None
    assert found.summary.status == "COMPLETED"
    assert {k: getattr(found.summary, k) for k in corpus.counts()} == corpus.counts()
    code, out, _ = await admin(capsys, "requeue", batch_id)
    assert code == EXIT_OK
    assert "is COMPLETED: nothing to rebuild" in out


@pytest.mark.usefixtures("lifecycle")
@pytest.mark.parametrize(
    ("batch_id", "says"),
    [
        ("../../etc", "is not a batch id"),
        ("0123456789ABCDEF0123456789ABCDEF", "is not a batch id"),
        ("0123456789abcdef0123456789abcdef", "batch 0123456789abcdef0123456789abcdef not found"),
    ],
)
async def test_requeue_of_a_malformed_or_unknown_id_says_so(
    capsys: pytest.CaptureFixture[str], batch_id: str, says: str
) -> None:
    code, out, err = await admin(capsys, "requeue", batch_id)
    assert code == EXIT_ERROR
    assert says in err
    assert "`pdfqueue admin batches` lists every tenant's batches" in err  # what to do next
    assert "Traceback" not in err + out


def _command(*argv: str) -> int:
    """`pdfqueue *argv`'s exit status, whether it returns it or exits with it."""
    try:
        return main(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize(
    "argv",
    [
        ("admin", "batches"),
        ("admin", "requeue", "0123456789abcdef0123456789abcdef"),
        ("purge", "--dry-run"),
        ("erase", "--email", "jane@people.example", "--dry-run"),
    ],
    ids=["admin batches", "admin requeue", "purge", "erase --email"],
)
async def test_a_command_run_by_hand_fails_at_once_when_postgresql_is_down(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]
) -> None:
    """Every administrator's command opens the same stores, and a person is waiting: no
    minute of waiting for PostgreSQL as a pod does, but the reason at once."""
    dead = f"postgresql://pdfqueue:pdfqueue@127.0.0.1:{free_port()}/pdfqueue"
    monkeypatch.setenv("PDFQUEUE_DATABASE_URL", dead)
    capsys.readouterr()
    started = time.monotonic()
    code = await asyncio.to_thread(_command, *argv)
    took_s = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == EXIT_ERROR
    said = " ".join(err.split())
    assert "postgresql is unavailable" in said
    assert "check PDFQUEUE_DATABASE_URL" in said  # what to do next
    assert "Traceback" not in err + out
    assert took_s < STARTUP_WAIT_S / 4, f"{took_s:.0f} s"
