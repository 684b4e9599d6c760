"""The e2e scenario, written once against a cluster driver.

upload a ZIP through the API -> the operator scales the workers up from zero -> the batch
completes with the exact expected counts -> the workers scale back to zero.

`KindDriver` (tests/support/e2e/kind.py) runs it on a kind cluster deployed by skaffold;
`LocalDriver` (tests/support/e2e/local.py) runs it with the API, workers and operator as local
processes configured from the chart's rendered manifests, on every CI run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import asyncpg
import httpx

from pdfqueue.domain.models import TERMINAL
from pdfqueue_dev.corpora.samples import SampleUser, build_corpus, seed_users, write_zip
from pdfqueue_dev.processes import wait_until


class ClusterDriver(Protocol):
    """What the scenario needs from a deployment of pdfqueue."""

    api_url: str
    """Base URL of the API as this test process reaches it."""
    token: str
    """A bearer token the deployment accepts."""
    users_table: str
    """The users table the deployment links PDFs to."""

    def database_url(self) -> str:
        """A PostgreSQL URL this test process can use to seed the users table."""
        ...

    def worker_replicas(self) -> int:
        """spec.replicas of the worker Deployment (what the operator decided)."""
        ...

    def workers_alive(self) -> int:
        """Worker pods or processes that still exist, those draining after a scale-down too."""
        ...

    def diagnostics(self) -> str:
        """Logs and state worth reading when the scenario fails."""
        ...


@dataclass
class Timeline:
    """What the scenario saw, for its assertions and its failure messages."""

    replicas: list[tuple[float, int]] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)

    def note_replicas(self, n: int) -> None:
        if not self.replicas or self.replicas[-1][1] != n:
            self.replicas.append((round(time.monotonic(), 1), n))


async def _seed(url: str, users: list[SampleUser], table: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await seed_users(conn, users, table=table)
    finally:
        await conn.close()


def run_scenario(
    driver: ClusterDriver,
    workdir: Path,
    *,
    files: int = 60,
    seed: int = 7,
    settle_s: float = 240,
    batch_s: float = 300,
) -> Timeline:
    """Upload, watch the workers scale up from zero, check the counts, watch them scale back."""
    seen = Timeline()
    corpus = build_corpus(files, seed=seed)
    asyncio.run(_seed(driver.database_url(), corpus.users, driver.users_table))
    archive = write_zip(corpus, workdir / "e2e.zip", seed=seed)

    def replicas() -> int:
        n = driver.worker_replicas()
        seen.note_replicas(n)
        return n

    # 1. Idle: the operator has scaled the workers to zero, and the last one has stopped: a
    #    worker told to stop a moment ago could otherwise take the whole batch on its way out,
    #    before the operator's next look at the queue.
    wait_until(
        lambda: replicas() == 0 and driver.workers_alive() == 0,
        "the idle workers scaled to zero and stopped",
        settle_s,
        interval_s=0.5,
        diagnostics=driver.diagnostics,
    )

    # 2. Upload through the API.
    client = httpx.Client(
        base_url=driver.api_url, timeout=60, headers={"Authorization": f"Bearer {driver.token}"}
    )
    with client:
        wait_until(
            lambda: _get(client, "/readyz") == 200,
            "the API ready",
            settle_s,
            interval_s=0.5,
            diagnostics=driver.diagnostics,
        )
        created = client.post(
            "/v1/batches", content=archive.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        assert created.status_code == 202, created.text
        batch_id = created.json()["batch_id"]

        # 3. The operator scales the workers up, and they finish the batch.
        def finished() -> dict[str, Any] | None:
            replicas()
            status: dict[str, Any] = client.get(f"/v1/batches/{batch_id}").json()
            seen.statuses.append(status)
            return status if status["status"] in TERMINAL else None

        final = wait_until(
            finished,
            f"batch {batch_id} finished",
            batch_s,
            interval_s=1.0,
            diagnostics=driver.diagnostics,
        )

    assert max(n for _, n in seen.replicas) >= 1, f"never scaled up: {seen.replicas}"
    assert final["status"] == "COMPLETED", (final, driver.diagnostics())
    expected = corpus.counts()
    assert {k: final[k] for k in expected} == expected, (final, expected)
    assert final["processed"] == final["total_files"] == len(corpus.files)

    # 4. Idle again: back to zero.
    wait_until(
        lambda: replicas() == 0,
        "the workers scaled back to zero",
        settle_s,
        interval_s=0.5,
        diagnostics=driver.diagnostics,
    )
    return seen


def _get(client: httpx.Client, path: str) -> int:
    try:
        return client.get(path).status_code
    except httpx.HTTPError:
        return 0
