"""Storage against the real S3 server: the native asyncio calls behave as the boto3 ones did."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from pathlib import Path

import pytest

from pdfqueue.domain.errors import (
    DependencyMisconfigured,
    ObjectNotFound,
    StorageError,
    StorageRejected,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import free_port

DATA = b"%PDF-1.4 " + bytes(range(256)) * 40


async def test_put_read_range_delete_round_trip(storage: Storage) -> None:
    key = "pdfs/u 1/a+b~é.pdf"  # spaces, '+', '~' and UTF-8 must be encoded as boto3 signs them
    await storage.put(key, DATA)
    assert await storage.read_range(key, 0, len(DATA)) == DATA
    assert await storage.read_range(key, 100, 7) == DATA[100:107]
    assert await storage.read_range(key, 5, 0) == b""
    # what boto3 sees: the same object, typed as before
    assert await storage.size(key) == len(DATA)
    head = storage.backend.client.head_object(  # type: ignore[attr-defined]
        Bucket="pdfqueue",
        Key=storage.backend.location.prefix + key,  # type: ignore[attr-defined]
    )
    assert head["ContentType"] == "application/pdf"
    await storage.delete(key)
    assert not await storage.exists(key)
    await storage.delete(key)  # deleting what is gone is no error, as on S3


async def test_a_put_signs_the_digest_it_is_given_and_s3_checks_it(storage: Storage) -> None:
    """The worker passes the digest it already computed for the key; the server checks the
    body against it, so a wrong one stores nothing."""
    await storage.put("hashed.pdf", DATA, sha256=hashlib.sha256(DATA).hexdigest())
    assert await storage.read_range("hashed.pdf", 0, len(DATA)) == DATA
    with pytest.raises(StorageError):
        await storage.put("wrong.pdf", DATA, sha256=hashlib.sha256(b"other").hexdigest())
    assert not await storage.exists("wrong.pdf")


async def test_a_missing_object_is_object_not_found(storage: Storage) -> None:
    with pytest.raises(ObjectNotFound) as caught:
        await storage.read_range("pdfs/nobody.pdf", 0, 10)
    assert caught.value.key == "pdfs/nobody.pdf"


async def test_a_range_past_the_end_returns_what_exists(storage: Storage) -> None:
    await storage.put("short.pdf", DATA)
    assert await storage.read_range("short.pdf", len(DATA) - 10, 1000) == DATA[-10:]
    assert await storage.read_range("short.pdf", 0, len(DATA) + 10) == DATA


async def test_the_native_calls_fail_as_the_boto3_calls(
    storage: Storage, settings: Settings
) -> None:
    """Same bytes or the same error type as `S3Backend` run on the thread pool."""
    await storage.put("same.pdf", DATA)
    backend = storage.backend
    cases = [("same.pdf", 0, 10), ("same.pdf", 9, 5000), ("same.pdf", len(DATA), 5), ("gone", 0, 5)]
    for key, start, length in cases:
        old = await _outcome(storage.run(backend.read_range, key, start, length))
        new = await _outcome(storage.read_range(key, start, length))
        assert new == old, (key, start, length)
    # a bucket that does not exist: a deployment to fix, not a missing object, on both paths
    elsewhere = Storage.from_settings(
        settings.model_copy(update={"storage_url": "s3://no-such-bucket-pdfqueue/x"}), threads=1
    )
    try:
        with pytest.raises(DependencyMisconfigured):
            await elsewhere.put("a.pdf", DATA)
        with pytest.raises(DependencyMisconfigured):
            await elsewhere.run(elsewhere.backend.put, "a.pdf", DATA)
    finally:
        await elsewhere.aclose()


async def _outcome(call: Awaitable[bytes]) -> bytes | type[Exception]:
    try:
        return await call
    except (ObjectNotFound, StorageError, StorageRejected) as exc:  # 416: StorageRejected
        return type(exc)


async def test_an_unreachable_endpoint_is_a_storage_error(settings: Settings) -> None:
    port = free_port()  # nothing listens on it
    down = Storage.from_settings(
        settings.model_copy(update={"s3_endpoint_url": f"http://127.0.0.1:{port}"}), threads=1
    )
    try:
        with pytest.raises(StorageError, match="S3 unreachable"):
            await down.put("a.pdf", DATA)
        with pytest.raises(StorageError, match="S3 unreachable"):
            await down.read_range("a.pdf", 0, 4)
        with pytest.raises(StorageError, match="S3 unreachable"):
            await down.delete("a.pdf")
    finally:
        await down.aclose()


async def test_a_folder_store_still_works_through_threads(tmp_path: Path) -> None:
    store = Storage.from_settings(Settings(storage_url=f"file://{tmp_path}"), threads=1)
    try:
        await store.put("a/b.pdf", DATA)
        assert await store.read_range("a/b.pdf", 3, 4) == DATA[3:7]
        await store.delete("a/b.pdf")
        with pytest.raises(ObjectNotFound):
            await store.read_range("a/b.pdf", 0, 1)
    finally:
        await store.aclose()
