"""Retention and erasure on the real stores: what goes, what stays, and the audit trail.

Each test runs real batches through the API and real workers, then removes some of what they
made and looks at every store: the rows in PostgreSQL, the objects in S3, the links in the
users table, and the audit record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import Eraser, parse_duration
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.postgres.retention import ERASED_NAME, RetentionStore
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import CLEAN, Corpus, build_corpus, seed_users, write_zip
from tests.support.helpers import GLOBEX, MakeCorpus, RunWorker, settings_env, upload

ROOT = Path(__file__).parents[1]


@pytest.fixture
async def corpus(db: asyncpg.Connection, settings: Settings) -> Corpus:
    """60 résumés of known users; the tests split them into batches.

    The users get ids of this test's own: every test has a users table of its own but all
    share pdfqueue_files, whose rows (and the PDFs' keys) name users by id, as they do in
    production, where there is one users table.
    """
    built = build_corpus(60, seed=11, mix=CLEAN)
    offset = secrets.randbelow(10**9) * 1000
    users = [dataclasses.replace(u, id=u.id + offset) for u in built.users]
    await seed_users(db, users, table=settings.users_table)
    return dataclasses.replace(built, users=users)


@pytest.fixture
async def eraser(settings: Settings) -> AsyncIterator[Eraser]:
    pool = await connect(settings.database_url, max_size=4)
    storage = Storage.from_settings(settings, threads=4)
    client = Redis.from_url(settings.redis_url)
    yield Eraser(
        RetentionStore.of(pool, settings),
        lifecycle_over(pool, client, settings),
        storage,
        settings,
    )
    await client.aclose()
    await storage.aclose()
    await pool.close()


async def upload_as_globex(api: httpx.AsyncClient, path: Path) -> str:
    """Upload as the other tenant (the `api` client speaks for acme)."""
    response = await api.post(
        "/v1/batches",
        content=path.read_bytes(),
        headers={**GLOBEX, "Content-Type": "application/zip"},
    )
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    return batch_id


def zip_of(corpus: Corpus, files: slice, path: Path) -> Path:
    return write_zip(dataclasses.replace(corpus, files=corpus.files[files]), path, junk=False)


async def links(db: asyncpg.Connection, settings: Settings) -> dict[int, str | None]:
    rows = await db.fetch(f'SELECT id, pdf_url FROM "{settings.users_table}"')
    return {r["id"]: r["pdf_url"] for r in rows}


async def file_rows(db: asyncpg.Connection, batch_id: str) -> list[asyncpg.Record]:
    return await db.fetch("SELECT * FROM pdfqueue_files WHERE batch_id = $1", batch_id)


async def audit_of(db: asyncpg.Connection, subject: str) -> list[asyncpg.Record]:
    return await db.fetch("SELECT * FROM pdfqueue_audit WHERE subject = $1 ORDER BY id", subject)


async def test_a_tenant_erases_its_batch_and_nothing_else(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    corpus: Corpus,
    db: asyncpg.Connection,
    settings: Settings,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    mine = await upload(api, zip_of(corpus, slice(0, 20), tmp_path / "a.zip"))
    other = await upload(api, zip_of(corpus, slice(20, 40), tmp_path / "b.zip"))
    globex = await upload_as_globex(api, zip_of(corpus, slice(40, 60), tmp_path / "c.zip"))
    await run_worker()
    before = await links(db, settings)
    mine_keys = {r["object_key"] for r in await file_rows(db, mine)}
    assert len(mine_keys) == 20
    assert all(k in before.values() for k in mine_keys)

    # another tenant can neither see nor erase it
    foreign = await api.delete(f"/v1/batches/{mine}", params={"erase": "true"}, headers=GLOBEX)
    assert foreign.status_code == 404
    assert len(await file_rows(db, mine)) == 20

    erased = await api.delete(f"/v1/batches/{mine}", params={"erase": "true"})
    assert erased.status_code == 200, erased.text
    assert erased.json() == {
        **erased.json(),
        "erased": True,
        "batches": 1,
        "files": 20,
        "objects": 21,  # its 20 PDFs and its ZIP
        "links": 20,
    }
    assert (await api.get(f"/v1/batches/{mine}")).status_code == 404
    assert (await api.get(f"/v1/batches/{mine}/files")).status_code == 404
    listed = (await api.get("/v1/batches")).json()["batches"]
    assert mine not in {b["batch_id"] for b in listed}

    after = await links(db, settings)
    assert {k for k in after.values() if k} == {k for k in before.values() if k} - mine_keys
    keys = set(s3_keys(""))
    assert not keys & mine_keys
    assert f"uploads/{mine}.zip" not in keys
    assert await file_rows(db, mine) == []
    assert await db.fetchval("SELECT count(*) FROM pdfqueue_batches WHERE id = $1", mine) == 0

    # the tenant's other batch and the other tenant's batch: untouched
    for batch_id, headers in ((other, {}), (globex, GLOBEX)):
        status = (await api.get(f"/v1/batches/{batch_id}", headers=headers)).json()
        assert status["status"] == "COMPLETED"
        assert status["processed"] == 20
        assert len(await file_rows(db, batch_id)) == 20
        assert f"uploads/{batch_id}.zip" in keys
    kept = {r["object_key"] for r in await file_rows(db, other)}
    assert kept <= keys
    assert kept <= set(after.values())

    # one audit record, with no file name or address in it
    (record,) = await audit_of(db, mine)
    assert (record["actor"], record["action"], record["files"]) == ("acme", "erase_batch", 20)
    assert record["objects"] == 21
    assert record["bytes"] > 0
    row_text = json.dumps({k: str(v) for k, v in dict(record).items()})
    assert not any(f.name in row_text or (f.email or "~") in row_text for f in corpus.files)

    # again: 404, and nothing more happens
    again = await api.delete(f"/v1/batches/{mine}", params={"erase": "true"})
    assert again.status_code == 404
    assert len(await audit_of(db, mine)) == 1
    assert (
        await api.delete(f"/v1/batches/{'0' * 31}g", params={"erase": "true"})
    ).status_code == 422


@pytest.mark.settings(job_timeout_s=1)
async def test_erasing_a_running_batch_cancels_it_and_waits_for_its_last_jobs(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    corpus: Corpus,
    db: asyncpg.Connection,
    eraser: Eraser,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    batch_id = await upload(api, zip_of(corpus, slice(0, 20), tmp_path / "a.zip"))
    waiting = await api.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
    assert waiting.status_code == 202, waiting.text
    assert waiting.json()["erased"] is False
    retry_after = int(waiting.headers["Retry-After"])
    assert retry_after == eraser.settle_s
    assert (await api.get(f"/v1/batches/{batch_id}")).status_code == 404  # hidden at once
    await run_worker()  # its ingest was dropped: nothing runs
    assert await file_rows(db, batch_id) == []

    await asyncio.sleep(retry_after + 1)
    done = await api.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
    assert done.status_code == 200
    assert done.json()["erased"] is True
    assert f"uploads/{batch_id}.zip" not in s3_keys("")
    assert len(await audit_of(db, batch_id)) == 1


async def test_purge_removes_ended_batches_keeps_links_and_never_a_running_one(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    corpus: Corpus,
    db: asyncpg.Connection,
    settings: Settings,
    eraser: Eraser,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    ended = await upload(api, zip_of(corpus, slice(0, 20), tmp_path / "a.zip"))
    await run_worker()
    running = await upload(api, zip_of(corpus, slice(20, 40), tmp_path / "b.zip"))
    linked = {r["object_key"] for r in await file_rows(db, ended)}
    # the ended batch ended long ago; the running one was created long ago
    await db.execute(
        "UPDATE pdfqueue_batches SET completed_at = now() - interval '1 hour',"
        " created_at = now() - interval '400 days' WHERE id = ANY($1::text[])",
        [ended, running],
    )

    dry = await eraser.purge(older_than_s=0, tenant="acme", dry_run=True)
    assert dry.removed.files >= 20
    assert len(await file_rows(db, ended)) == 20

    report = await eraser.purge(older_than_s=0, tenant="acme")
    assert report.removed.batches >= 1
    assert await file_rows(db, ended) == []
    assert (await api.get(f"/v1/batches/{ended}")).status_code == 404
    keys = set(s3_keys(""))
    assert f"uploads/{ended}.zip" not in keys
    assert linked <= keys  # the PDFs it linked, and the links, stay
    assert linked <= set((await links(db, settings)).values())
    (record,) = await audit_of(db, ended)
    assert (record["actor"], record["action"], record["files"]) == ("retention", "purge", 20)

    assert (await api.get(f"/v1/batches/{running}")).json()["status"] == "PENDING"
    await run_worker()
    assert (await api.get(f"/v1/batches/{running}")).json()["status"] == "COMPLETED"

    await eraser.purge(older_than_s=0, tenant="acme")  # again: nothing more of it
    assert len(await audit_of(db, ended)) == 1


@pytest.mark.settings(retention_days=30, tenant_retention_days={"globex": 0})
async def test_retention_is_per_tenant(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    corpus: Corpus,
    db: asyncpg.Connection,
    eraser: Eraser,
    tmp_path: Path,
) -> None:
    young = await upload(api, zip_of(corpus, slice(0, 10), tmp_path / "a.zip"))
    old = await upload(api, zip_of(corpus, slice(10, 20), tmp_path / "b.zip"))
    forever = await upload_as_globex(api, zip_of(corpus, slice(20, 30), tmp_path / "c.zip"))
    await run_worker()
    await db.execute(
        "UPDATE pdfqueue_batches SET completed_at = now() - interval '29 days' WHERE id = $1", young
    )
    await db.execute(
        "UPDATE pdfqueue_batches SET completed_at = now() - interval '31 days'"
        " WHERE id = ANY($1::text[])",
        [old, forever],
    )
    await eraser.purge()
    remaining = {
        r["id"]
        for r in await db.fetch(
            "SELECT id FROM pdfqueue_batches WHERE id = ANY($1::text[])", [young, old, forever]
        )
    }
    assert remaining == {young, forever}


async def test_erasing_a_person_across_tenants(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    corpus: Corpus,
    db: asyncpg.Connection,
    settings: Settings,
    eraser: Eraser,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    person = corpus.files[0]
    assert person.email
    # acme links the person; globex's batch holds the same résumé (already linked)
    acme = await upload(api, zip_of(corpus, slice(0, 10), tmp_path / "a.zip"))
    await run_worker()
    globex = await upload_as_globex(api, zip_of(corpus, slice(0, 5), tmp_path / "c.zip"))
    await run_worker()
    user_id = await db.fetchval(
        f'SELECT id FROM "{settings.users_table}" WHERE lower(email) = $1', person.email
    )
    key = (await links(db, settings))[user_id]
    assert key
    assert key in s3_keys("")

    dry = await eraser.erase_person(person.email.upper(), dry_run=True)
    assert (dry.files, dry.objects) == (2, 1)
    assert (await links(db, settings))[user_id] == key

    removed = await eraser.erase_person(person.email.upper())
    assert (removed.files, removed.objects, removed.links) == (2, 1, 1)
    assert (await links(db, settings))[user_id] is None
    assert key not in s3_keys("")
    for batch_id in (acme, globex):
        rows = await db.fetch(
            "SELECT name, reason, user_id, object_key, outcome FROM pdfqueue_files"
            " WHERE batch_id = $1 AND name = $2",
            batch_id,
            ERASED_NAME,
        )
        assert len(rows) == 1
        assert rows[0]["user_id"] is None
        assert rows[0]["object_key"] is None
    # the counts stay
    assert (await api.get(f"/v1/batches/{acme}")).json()["linked"] == 10
    # the audit names a keyed hash, never the address
    subject = await eraser.address_hash(person.email)
    record = (await audit_of(db, subject))[-1]
    assert record["files"] == 2
    assert record["action"] == "erase_person"
    assert person.email not in subject
    assert (await eraser.erase_person(person.email)).files == 0  # again: nothing left


async def test_an_erasure_killed_half_way_is_finished_by_a_rerun(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    corpus: Corpus,
    db: asyncpg.Connection,
    settings: Settings,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    batch_id = await upload(api, zip_of(corpus, slice(0, 60), tmp_path / "a.zip"))
    await run_worker()
    assert (await api.get(f"/v1/batches/{batch_id}")).json()["linked"] == 60
    objects = {r["object_key"] for r in await file_rows(db, batch_id)}
    env = settings_env(settings)
    script = (
        "import asyncio, os, sys\n"
        "from pdfqueue.domain.settings import Settings\n"
        "from pdfqueue.runtime.connections import ADMIN, Stores\n"
        "async def main():\n"
        "    stores = await Stores.open(Settings(), ADMIN)\n"
        "    eraser = stores.eraser()\n"
        "    real = eraser.storage.delete\n"
        "    seen = 0\n"
        "    async def slow(key):\n"
        "        nonlocal seen\n"
        "        seen += 1\n"
        "        mine = seen\n"
        "        await real(key)\n"
        "        if mine == 30:\n"
        "            print('half', flush=True)\n"
        "            await asyncio.sleep(3600)\n"
        "    object.__setattr__(eraser.storage, 'delete', slow)\n"
        f"    await eraser.erase_batch({batch_id!r}, tenant=None)\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line.strip() == b"half", (await proc.communicate())[1].decode()[-3000:]
    proc.send_signal(signal.SIGKILL)
    await proc.wait()

    # half-way: hidden, links gone before their objects, some objects left
    assert (await api.get(f"/v1/batches/{batch_id}")).status_code == 404
    left = objects & set(s3_keys(""))
    assert 0 < len(left) < len(objects)
    assert not set((await links(db, settings)).values()) & objects  # never a dangling link

    purge = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "pdfqueue.cli.main", "purge", "--older-than", "0s"),
        *("--tenant", "acme", "--json"),
        env=env,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await purge.communicate()
    assert purge.returncode == 0
    assert json.loads(out)["erasures_finished"] >= 1
    assert not objects & set(s3_keys(""))
    assert await file_rows(db, batch_id) == []
    assert len(await audit_of(db, batch_id)) == 1


@pytest.mark.parametrize("text", ["30", "-1d", "1w", "", "1.5h", "d", "99999999999d"])
def test_durations_that_are_not_durations_are_refused(text: str) -> None:
    from pdfqueue.domain.errors import InvalidDuration

    with pytest.raises(InvalidDuration):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "seconds"), [("0s", 0), ("15m", 900), ("12h", 43200), ("30d", 2592000)]
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_a_retention_that_is_not_a_number_of_days_is_refused_at_start() -> None:
    env = {**os.environ, "PDFQUEUE_RETENTION_DAYS": "thirty"}
    done = subprocess.run(
        [sys.executable, "-c", "from pdfqueue.domain.settings import Settings; Settings()"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "retention_days" in done.stderr


async def scan_naming(redis: Redis, batch_id: str) -> list[str]:
    """Every Redis key whose name holds the batch id (a test may glob; pdfqueue never does)."""
    return sorted([k.decode() async for k in redis.scan_iter(match=f"*{batch_id}*", count=1000)])


async def test_an_erased_batch_leaves_no_redis_key_naming_it(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, redis: Redis
) -> None:
    """arq keeps a job's result (its arguments: member names) for `keep_result`; erasure
    removes them with the rest of the batch's keys, a retry round's included."""
    _, path = await make_corpus(30, seed=16)
    batch_id = await upload(api, path)
    await run_worker()
    again = await api.post(f"/v1/batches/{batch_id}/retry", params={"all_failed": "true"})
    assert again.status_code == 202, again.text
    await run_worker()
    assert await scan_naming(redis, batch_id)  # arq's results, fair-dispatch state, ...
    done = await api.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
    assert done.status_code == 200, done.text
    assert await scan_naming(redis, batch_id) == []


async def test_no_job_of_a_batch_starts_once_its_erasure_is_accepted(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, redis: Redis
) -> None:
    """A retry round accepted just before the erasure: its fan-out job, queued, runs after
    the erasure is accepted and must queue nothing; no process job of the round runs."""
    _, path = await make_corpus(30, seed=16)
    batch_id = await upload(api, path)
    await run_worker()
    again = await api.post(f"/v1/batches/{batch_id}/retry", params={"all_failed": "true"})
    assert again.status_code == 202, again.text
    erasing = await api.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
    assert erasing.status_code == 202, erasing.text  # the round runs: it waits for its jobs
    assert (await api.post(f"/v1/batches/{batch_id}/retry")).status_code == 404
    await run_worker()
    ran = [k for k in await scan_naming(redis, batch_id) if k.startswith("arq:result:process:")]
    assert [k for k in ran if ":r1:" in k] == []
