"""Ready means able to work: a Redis near its maxmemory (noeviction) is found before it
refuses writes. New uploads and retries get 503 with Retry-After and say why, /readyz says
so and stays ready for reads, and the room comes back by itself once Redis has it."""

from __future__ import annotations

import contextlib
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import free_port, wait_until
from tests.security.test_sec_api import serve
from tests.support.helpers import ACME

MAXMEMORY = 4 * 1024 * 1024


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[str]:
    """A Redis of its own with 4 MiB of maxmemory, as the chart's (noeviction, AOF)."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "yes", "--dir", str(tmp_path), "--maxmemory", str(MAXMEMORY)]
    argv += ["--maxmemory-policy", "noeviction"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = Redis(port=port)
    try:
        wait_until(lambda: _pong(client), f"redis on {port}", timeout_s=30)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


def _pong(client: Redis) -> bool:
    with contextlib.suppress(Exception):
        return bool(client.ping())
    return False


def _fill(client: Redis, share: float) -> int:
    """Write ballast until used memory is past `share` of maxmemory; how many keys."""
    n = 0
    while int(client.info("memory")["used_memory"]) < share * MAXMEMORY:
        client.set(f"ballast:{n}", b"x" * 32768)
        n += 1
    return n


async def test_uploads_wait_while_redis_is_nearly_full(
    settings: Settings, small_redis: str, tmp_path: Path
) -> None:
    zipped = tmp_path / "one.zip"
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("a.pdf", b"%PDF-1.4 not much")
    near = settings.model_copy(update={"redis_url": small_redis})
    client = Redis.from_url(small_redis)
    upload = {
        "content": zipped.read_bytes(),
        "headers": {**ACME, "Content-Type": "application/zip"},
    }
    async with serve(near) as api:
        assert (await api.post("/v1/batches", **upload)).status_code == 202
        ballast = _fill(client, 0.92)
        refused = await api.post("/v1/batches", **upload)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "30"
        assert "of its maxmemory is used" in refused.json()["detail"]
        ready = await api.get("/readyz")
        assert ready.status_code == 200  # reads still work: the pod stays in its Service
        assert ready.json()["redis"].startswith("ok, but new uploads are refused: 9")
        listed = await api.get("/v1/batches", headers=ACME)
        assert listed.status_code == 200
        client.delete(*(f"ballast:{i}" for i in range(ballast)))
        assert (await api.post("/v1/batches", **upload)).status_code == 202
        assert (await api.get("/readyz")).json()["redis"] == "ok"
    client.close()
