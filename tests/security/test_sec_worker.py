"""Hostile archives against the API and the worker: ZIP directories of millions of entries."""

from __future__ import annotations

import re
import struct
import tracemalloc
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain.errors import DirectoryTooLarge
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.storage import Storage
from pdfqueue.stores.storage.zipdir import DirectoryLimits, count_entries
from pdfqueue_dev.corpora.samples import CLEAN, render_pdf, seed_users
from tests.support.helpers import MakeCorpus, RunWorker
from tests.support.zipcraft import Part, build, local_header

ENTRY_NAME = b"a.pdf"
"""51-byte directory entries (46 fixed + this name): the cheapest way to ask for 340 bytes
of `ZipInfo` each from a parser that builds every entry before counting them."""
PEAK_BYTES = 64 * 1024**2
"""What reading such an archive may allocate at its peak. The old code parsed the whole
directory first: 1.1-1.4 GB traced in ingest, and no try finished within its deadline."""


def huge_directory_zip(entries: int, *, declared: int | None = None) -> bytes:
    """One 5-byte stored member, then `entries` directory entries all naming it.

    With `declared`, a plain end record claims that many entries (a lie); otherwise the
    count is honest, in ZIP64 end records once it passes 65,535.
    """
    data = b"%PDF-"
    crc = zlib.crc32(data)
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, 5, 5, len(ENTRY_NAME), 0)
    # No extra field, comment, disk or attributes; the local header at offset 0.
    entry = struct.pack(
        "<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, 0, 0, 0, 0, crc, 5, 5, 5, 0, 0, 0, 0, 0, 0
    )
    assert len(entry + ENTRY_NAME) == 51
    directory = (entry + ENTRY_NAME) * entries
    start = len(local) + len(data) + len(ENTRY_NAME)
    if declared is not None:
        end = struct.pack(
            "<4s4H2LH", b"PK\x05\x06", 0, 0, declared, declared, len(directory), start, 0
        )
        return local + ENTRY_NAME + data + directory + end
    end64 = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, len(directory), start
    )
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, start + len(directory), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF, 0)
    return local + ENTRY_NAME + data + directory + end64 + locator + end


TWO_MILLION = "two million entries, declared"
LYING = "650,000 entries, 10 declared"
HUGE = {
    TWO_MILLION: (
        lambda: huge_directory_zip(2_000_000),
        "the archive declares 2000000 members; the limit is 100000"
        " (PDFQUEUE_MAX_MEMBERS): split it into smaller ZIPs",
    ),
    LYING: (
        lambda: huge_directory_zip(650_000, declared=10),  # 33 MB: under the directory limit
        "the archive holds more than 100000 members; that is the limit"
        " (PDFQUEUE_MAX_MEMBERS): split it into smaller ZIPs",
    ),
}


async def in_chunks(data: bytes, size: int = 1024**2) -> AsyncIterator[bytes]:
    view = memoryview(data)
    for at in range(0, len(data), size):
        yield bytes(view[at : at + size])


async def traced(work: Any) -> tuple[Any, int]:
    """Await `work` and return its result with the peak of Python allocations meanwhile."""
    tracemalloc.start()
    try:
        result = await work
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shape", list(HUGE))
async def test_the_api_refuses_a_huge_directory_with_413_and_keeps_nothing(
    shape: str,
    api: httpx.AsyncClient,
    settings: Settings,
    redis: Redis,
    db: asyncpg.Connection,
    s3_keys: Callable[[str], list[str]],
) -> None:
    build, reason = HUGE[shape]
    body = build()
    since = await db.fetchval("SELECT now()")  # other tests' batches may still be settling
    response, peak = await traced(
        api.post(
            "/v1/batches",
            content=in_chunks(body),
            headers={"Content-Type": "application/zip"},
        )
    )
    assert response.status_code == 413, response.text
    assert response.json() == {"detail": reason}
    assert s3_keys("") == []
    created = "SELECT count(*) FROM pdfqueue_batches WHERE tenant = 'acme' AND created_at >= $1"
    assert await db.fetchval(created, since) == 0
    assert await redis.zcard(settings.queue_name) == 0
    assert peak < PEAK_BYTES, f"peak {peak / 1e6:.0f} MB"


@pytest.mark.timeout(300)
# Tracing every allocation slows the walk several times over; on a busy machine that could
# pass the 20 s job deadline of the test settings, which is not what this test is about.
@pytest.mark.settings(job_timeout_s=120, job_completion_wait_s=130)
@pytest.mark.parametrize("shape", list(HUGE))
async def test_ingest_fails_a_huge_directory_with_its_reason_and_nothing_else(
    shape: str,
    settings: Settings,
    storage: Storage,
    redis: Redis,
    db: asyncpg.Connection,
    run_worker: RunWorker,
) -> None:
    """As a PdfBatch could name any object: ingest refuses the archive with bounded memory."""
    build, reason = HUGE[shape]
    await seed_users(db, [], table=settings.users_table)
    source = f"incoming/{uuid.uuid4().hex}.zip"
    await storage.run(storage.backend.put, source, build())  # boto3: one 100 MB PUT
    batch_id = uuid.uuid4().hex
    pool = await connect(settings.database_url, max_size=2)
    try:
        await lifecycle_over(pool, redis, settings).register(
            batch_id=batch_id,
            tenant="acme",
            source_key=source,
        )
    finally:
        await pool.close()
    _, peak = await traced(run_worker())
    row = await db.fetchrow("SELECT * FROM pdfqueue_batches WHERE id = $1", batch_id)
    assert (row["status"], row["error"], row["total_files"]) == ("FAILED", reason, None)
    assert (
        await db.fetchval("SELECT count(*) FROM pdfqueue_files WHERE batch_id = $1", batch_id) == 0
    )
    assert await redis.zcard(settings.queue_name) == 0  # no process job was ever queued
    assert peak < PEAK_BYTES, f"peak {peak / 1e6:.0f} MB"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shape", list(HUGE))
async def test_the_shared_directory_walk_holds_a_few_megabytes_at_most(
    shape: str, settings: Settings, storage: Storage
) -> None:
    """The check both the API and ingest run, alone: one ranged read of the tail, then the
    directory one megabyte at a time, nothing kept per entry."""
    build, reason = HUGE[shape]
    key = f"incoming/{uuid.uuid4().hex}.zip"
    await storage.run(storage.backend.put, key, build())
    tracemalloc.start()
    try:
        with pytest.raises(DirectoryTooLarge, match=re.escape(reason)):
            count_entries(storage.backend, key, DirectoryLimits.from_settings(settings))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024**2, f"peak {peak / 1e6:.1f} MB"


@pytest.mark.settings(pdfs_per_job=1)  # each member read by a range of its own
async def test_a_member_whose_local_header_disagrees_fails_alone_with_the_real_worker(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    """Each lie of a local header fails its member as `corrupt_member`, read by range from
    the object store by the real process job; the honest members are linked."""
    corpus, _ = await make_corpus(4, seed=71, mix=CLEAN)
    bobby, dora, erin, last = (render_pdf(f, seed=71) for f in corpus.files)
    bobby_part = Part(b"bobby.pdf", bobby)
    header = local_header(bobby_part)
    padding = len(bobby) + 10  # the declared spans do not overlap
    decoy = struct.pack("<HH", 0xCAFE, padding - 4 + len(header)) + b"\0" * (padding - 4)
    same = {"crc": zlib.crc32(bobby), "compressed": len(bobby), "size": len(bobby)}
    parts = [
        Part(b"alice.pdf", decoy, local=same | {"extra_length": len(decoy) + len(header)}),
        bobby_part,
        Part(b"alice2.pdf", dora, local={"name": b"bobby2.pdf"}),
        Part(b"erin.pdf", erin, local={"crc": zlib.crc32(erin) ^ 1}),
        Part(b"last.pdf", last, local={"extra_length": 0xFFFF}),  # runs past the object
        Part(b"notes.txt", b"n" * 3000),  # so that only the extra field reads past the end
    ]
    archive = build(parts, central={0: {"crc": zlib.crc32(bobby), "size": len(bobby)}})
    response = await api.post(
        "/v1/batches", content=archive, headers={"Content-Type": "application/zip"}
    )
    assert response.status_code == 202, response.text
    batch_id = response.json()["batch_id"]
    await run_worker()
    rows = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    assert {r["name"]: (r["outcome"], r["reason"]) for r in rows} == {
        "alice.pdf": ("failed", "corrupt_member"),
        "bobby.pdf": ("linked", None),
        "alice2.pdf": ("failed", "corrupt_member"),
        "erin.pdf": ("failed", "corrupt_member"),
        "last.pdf": ("failed", "corrupt_member"),
        "notes.txt": ("ignored", "not_a_pdf"),
    }
