"""Ready means able to work: a PostgreSQL running out of connections is found before a worker
the autoscaler adds cannot connect. New uploads and retries get 503 with Retry-After and say
why, /readyz says so and stays ready, the batch already admitted finishes, and uploads are
taken again once connections are free. Every client's connections count (the host
application shares the server), as pg_stat_activity shows them; `max_connections` less the
reserved ones is the limit, as on RDS and Cloud SQL, whose parameter groups set the same."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.pool import connect, connection_use
from pdfqueue.stores.postgres.schema import migrate
from pdfqueue_dev.corpora.samples import build_corpus, seed_users, write_zip
from pdfqueue_dev.processes import free_port
from tests.security.test_sec_api import serve
from tests.support.helpers import ACME

ROOT = Path(__file__).resolve().parents[1]
REFUSE_SHARE = 0.25


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL of its own (tools/services.sh): only this test's connections are on it."""
    port = free_port()
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PDFQUEUE_PG_PORT": str(port)}
    services = ["bash", str(ROOT / "tools/services.sh")]
    state = tmp_path / "pg-state"
    subprocess.run([*services, "start", str(state), "--only", "postgres"], env=env,
                   check=True, capture_output=True, timeout=120)  # fmt: skip
    try:
        yield f"postgresql://pdfqueue:pdfqueue@127.0.0.1:{port}/pdfqueue"
    finally:
        subprocess.run([*services, "stop", str(state), "--only", "postgres"], env=env,
                       check=False, capture_output=True, timeout=120)  # fmt: skip


async def test_uploads_wait_while_postgres_is_nearly_out_of_connections(
    settings: Settings, own_postgres: str, tmp_path: Path
) -> None:
    near = settings.model_copy(
        update={"database_url": own_postgres, "database_connections_refuse_share": REFUSE_SHARE}
    )
    pool = await connect(own_postgres, max_size=1)
    async with pool.acquire() as conn:
        await migrate(conn)
        corpus = build_corpus(8, seed=41)
        await seed_users(conn, corpus.users, table=near.users_table)
    await pool.close()
    zipped = write_zip(corpus, tmp_path / "b.zip", seed=41)
    upload = {"content": zipped.read_bytes(), "headers": {"Content-Type": "application/zip"}}
    held: list[asyncpg.Connection] = []
    async with serve(near, **ACME) as api:
        admitted = await api.post("/v1/batches", **upload)
        assert admitted.status_code == 202, admitted.text
        probe = await connect(own_postgres, max_size=1)
        use = await connection_use(probe)
        while use.share < REFUSE_SHARE:  # other clients take connections: the host's, say
            held.append(await asyncpg.connect(own_postgres))
            use = await connection_use(probe)
        refused = await api.post("/v1/batches", **upload)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "30"
        assert f"{use.used} of its {use.limit} connections are in use" in refused.json()["detail"]
        ready = await api.get("/readyz")
        assert ready.status_code == 200  # reads still work: the pod stays in its Service
        assert ready.json()["postgresql"].startswith("ok, but new uploads are refused: ")
        assert (await api.get("/v1/batches")).status_code == 200

        from pdfqueue_worker.app import build_worker

        worker = build_worker(near, burst=True, handle_signals=False)
        try:
            await worker.main()  # the batch already admitted goes on, and finishes
        finally:
            await worker.close()
        batch = (await api.get(f"/v1/batches/{admitted.json()['batch_id']}")).json()
        assert batch["status"] == "COMPLETED"
        assert {k: batch[k] for k in corpus.counts()} == corpus.counts()

        for conn in held:
            await conn.close()
        await probe.close()
        assert (await api.post("/v1/batches", **upload)).status_code == 202
        assert (await api.get("/readyz")).json()["postgresql"] == "ok"
