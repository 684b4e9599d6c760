"""Ready means able to work: an object store that refuses writes while its bucket answers.

versitygw on a tmpfs filled to the brim answers HEAD as before and every PUT with
`507 InsufficientStorage`, as S3-compatible stores do on a full disk (MinIO's
`XMinioStorageFull` is the same class of answer, a bucket quota or a revoked
`s3:PutObject` the same for pdfqueue). The first upload after it fills is refused when its
part is; from then on uploads get 503 with Retry-After before a byte is read, /readyz says so
and stays ready, `pdfqueue_storage_writable` is 0; once there is room a probe write finds it,
uploads are taken again, and the batch admitted before the disk filled finishes exactly.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import pdfqueue.stores.storage
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import build_corpus, seed_users, write_zip
from pdfqueue_dev.processes import free_port
from tests.security.test_sec_api import serve
from tests.support.helpers import ACME
from tests.support.servers import serving

TOOLS = Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools")) / "bin"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """versitygw over a 16 MiB tmpfs of its own: its endpoint, and the mount to fill."""
    if os.geteuid() != 0:
        pytest.fail("a tmpfs of its own needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], check=True)
    try:
        (mount / "data").mkdir()
        port = free_port()
        env = {
            **os.environ,
            "ROOT_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
            "ROOT_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        }
        argv = [str(TOOLS / "versitygw"), "--port", f"127.0.0.1:{port}", "--region", "us-east-1"]
        argv += ["--quiet", "--keep-alive", "posix", str(mount / "data")]
        with serving(argv, port, tmp_path / "versitygw.log", env):
            yield f"http://127.0.0.1:{port}", mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path) -> Path:
    """A ballast file taking all but a few KiB of the disk."""
    ballast = mount / "ballast"
    free = os.statvfs(mount)
    with ballast.open("wb") as out:
        out.write(b"\0" * (free.f_bavail * free.f_frsize - 8 * 1024))
    return ballast


async def test_uploads_wait_while_the_store_refuses_writes(
    settings: Settings,
    small_disk: tuple[str, Path],
    db: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, mount = small_disk
    monkeypatch.setattr(pdfqueue.stores.storage, "WRITE_PROBE_EVERY_S", 0.0)
    on = settings.model_copy(update={"s3_endpoint_url": endpoint})
    storage = Storage.from_settings(on, threads=1)
    await storage.ensure_bucket()
    await storage.aclose()
    corpus = build_corpus(12, seed=51)
    await seed_users(db, corpus.users, table=on.users_table)  # type: ignore[arg-type]
    zipped = write_zip(corpus, tmp_path / "b.zip", seed=51)
    upload = {"content": zipped.read_bytes(), "headers": {"Content-Type": "application/zip"}}
    async with serve(on, **ACME) as api:
        admitted = await api.post("/v1/batches", **upload)
        assert admitted.status_code == 202, admitted.text
        ballast = _fill(mount)

        first = await api.post("/v1/batches", **upload)  # its part is refused: 507
        assert first.status_code == 503, first.text
        refused = await api.post("/v1/batches", **upload)  # refused before it is read
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "30"
        assert refused.json()["detail"].startswith("storage refuses writes")
        ready = await api.get("/readyz")
        assert ready.status_code == 200  # reads still work: the pod stays in its Service
        assert ready.json()["storage"].startswith("ok, but new uploads are refused: writes are")
        assert "InsufficientStorage" in ready.json()["storage"]
        assert "pdfqueue_storage_writable 0.0" in (await api.get("/metrics")).text

        ballast.unlink()
        taken = await api.post("/v1/batches", **upload)  # the probe finds room, and it is taken
        assert taken.status_code == 202, taken.text
        assert (await api.get("/readyz")).json()["storage"] == "ok"
        assert "pdfqueue_storage_writable 1.0" in (await api.get("/metrics")).text

        from pdfqueue_worker.app import build_worker

        worker = build_worker(on, burst=True, handle_signals=False)
        try:
            await worker.main()
        finally:
            await worker.close()
        batches = [
            (await api.get(f"/v1/batches/{r.json()['batch_id']}")).json() for r in (admitted, taken)
        ]
    # the same PDFs twice: each user linked once, by whichever batch came first
    expected = corpus.counts()
    assert [b["status"] for b in batches] == ["COMPLETED", "COMPLETED"]
    assert sum(b["linked"] for b in batches) == expected["linked"]
    assert sum(b["skipped_already_exists"] for b in batches) == (
        expected["linked"] + 2 * expected["skipped_already_exists"]
    )
    for batch in batches:
        assert batch["failed"] == expected["failed"]
