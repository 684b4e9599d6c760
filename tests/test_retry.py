"""Re-running a batch's failed files: once, with exact counters and each file's history."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from pdfqueue.cli.main import EXIT_ERROR, EXIT_FILES_FAILED, EXIT_OK, main
from pdfqueue.domain import keys
from pdfqueue.domain.pdfbatch import manifest
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import OPERATOR, Stores
from pdfqueue.stores.kubeapi import connect
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import CLEAN, Expect
from pdfqueue_dev.processes import wait_until_async
from pdfqueue_operator.kube import Kube
from pdfqueue_operator.model import ObjectRef, PdfBatchObject
from pdfqueue_operator.reconcile import BatchReconciler
from tests.support.browser import DevTools
from tests.support.helpers import ACME, ACME_TOKEN, GLOBEX, MakeCorpus, RunWorker, upload
from tests.support.kube_env import Cluster, StartOperator

pytestmark = pytest.mark.settings(max_tries=2)


def dead_endpoint() -> str:
    """An S3 endpoint where nothing listens: every call is refused, as when S3 is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def run_with_storage_down(settings: Settings) -> None:
    """Ingest with S3 up, then every process job's tries with S3 down, until all are spent."""
    from pdfqueue_worker.app import build_worker

    for options, config in (
        ({"max_burst_jobs": 1}, settings),
        ({}, settings.model_copy(update={"s3_endpoint_url": dead_endpoint()})),
    ):
        worker = build_worker(config, burst=True, handle_signals=False, **options)
        try:
            await worker.main()
        finally:
            await worker.close()


async def status_of(api: httpx.AsyncClient, batch_id: str) -> dict[str, Any]:
    response = await api.get(f"/v1/batches/{batch_id}")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def report(api: httpx.AsyncClient, batch_id: str) -> dict[str, dict[str, Any]]:
    rows = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    return {r["name"]: r for r in rows}


async def failed_by_storage(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, settings: Settings, n: int = 24
) -> tuple[Any, str]:
    corpus, path = await make_corpus(n, seed=15)
    batch_id = await upload(api, path)
    await run_with_storage_down(settings)
    status = await status_of(api, batch_id)
    assert status["status"] == "COMPLETED"
    assert status["failed"] == status["processed"] == status["total_files"] == n
    assert status["linked"] == 0
    rows = await report(api, batch_id)
    assert {rows[f.name]["reason"] for f in corpus.files} == {"storage_unavailable"}
    return corpus, batch_id


def counters(status: dict[str, Any]) -> dict[str, int]:
    return {e.value: status[e.value] for e in Expect}


async def test_storage_down_for_a_whole_batch_then_one_retry_links_it(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
    db: asyncpg.Connection,
) -> None:
    corpus, batch_id = await failed_by_storage(api, make_corpus, settings)

    response = await api.post(f"/v1/batches/{batch_id}/retry")
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "PROCESSING"
    assert response.json()["retries"] == 1
    assert response.json()["failed"] == response.json()["processed"] == 0
    await run_worker()

    status = await status_of(api, batch_id)
    assert status["status"] == "COMPLETED"
    assert counters(status) == corpus.counts()
    assert status["processed"] == status["total_files"] == 24
    rows = await report(api, batch_id)
    for f in corpus.files:
        row = rows[f.name]
        assert (row["outcome"], row["tries"]) == (f.expect.value, 2), row
        assert row["previous_reason"] == "storage_unavailable"
        if f.reason:
            assert row["reason"] == f.reason
    durable = await db.fetchrow(
        "SELECT status, retries, processed, linked, failed FROM pdfqueue_batches WHERE id = $1",
        batch_id,
    )
    assert dict(durable) == {
        "status": "COMPLETED",
        "retries": 1,
        "processed": 24,
        "linked": corpus.counts()["linked"],
        "failed": corpus.counts()["failed"],
    }
    linked = await db.fetchval(
        f'SELECT count(*) FROM "{settings.users_table}" WHERE pdf_url IS NOT NULL'
    )
    already = corpus.counts()["skipped_already_exists"]
    assert linked == corpus.counts()["linked"] + already  # seeded links stay as they were
    csv = (await api.get(f"/v1/batches/{batch_id}/files?format=csv")).text
    assert csv.splitlines()[0].endswith(",tries,previous_reason")

    # what is left failed is not transient (corrupt, encrypted): nothing to retry now
    again = await api.post(f"/v1/batches/{batch_id}/retry")
    assert again.status_code == 409, again.text
    assert "no transiently failed file" in again.json()["detail"]
    assert counters(await status_of(api, batch_id)) == corpus.counts()


async def test_all_failed_reruns_permanent_failures_and_keeps_their_reason(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    corpus, path = await make_corpus(30, seed=16)
    batch_id = await upload(api, path)
    await run_worker()
    before = await status_of(api, batch_id)
    assert counters(before) == corpus.counts()
    assert before["failed"] > 0

    assert (await api.post(f"/v1/batches/{batch_id}/retry")).status_code == 409
    response = await api.post(f"/v1/batches/{batch_id}/retry", params={"all_failed": "true"})
    assert response.status_code == 202, response.text
    await run_worker()

    after = await status_of(api, batch_id)
    assert after["status"] == "COMPLETED"
    assert after["retries"] == 1
    assert counters(after) == corpus.counts()
    rows = await report(api, batch_id)
    for f in corpus.files:
        row = rows[f.name]
        retried = f.expect is Expect.FAILED
        assert row["tries"] == (2 if retried else 1), row
        assert row["previous_reason"] == (f.reason if retried else None), row
        assert (row["outcome"], row["reason"]) == (f.expect.value, f.reason), row


async def test_racing_retry_calls_start_one_round(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
    redis: Redis,
) -> None:
    corpus, batch_id = await failed_by_storage(api, make_corpus, settings, n=16)
    answers = await asyncio.gather(*(api.post(f"/v1/batches/{batch_id}/retry") for _ in range(8)))
    codes = sorted(a.status_code for a in answers)
    assert codes.count(202) >= 1, [a.text for a in answers]
    assert set(codes) <= {202, 409}, [a.text for a in answers]
    assert (await status_of(api, batch_id))["retries"] == 1
    retry_jobs = [k async for k in redis.scan_iter(f"arq:job:retry:{batch_id}:*")]
    assert retry_jobs == [f"arq:job:{keys.retry_job(batch_id, 1)}".encode()]
    await run_worker()

    status = await status_of(api, batch_id)
    assert status["status"] == "COMPLETED"
    assert status["retries"] == 1
    assert counters(status) == corpus.counts()
    assert status["processed"] == 16
    rows = await report(api, batch_id)
    assert {rows[f.name]["tries"] for f in corpus.files} == {2}
    assert rows["notes.txt"]["tries"] == 1  # not a PDF: never processed, never retried


async def test_retry_after_the_live_state_expired_counts_from_the_durable_record(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
    redis: Redis,
) -> None:
    corpus, batch_id = await failed_by_storage(api, make_corpus, settings, n=16)
    await redis.delete(keys.batch(batch_id), keys.outcomes(batch_id))  # as if the TTL passed

    response = await api.post(f"/v1/batches/{batch_id}/retry")
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "PROCESSING"
    assert response.json()["processed"] == 0
    await run_worker()

    status = await status_of(api, batch_id)
    assert status["status"] == "COMPLETED"
    assert counters(status) == corpus.counts()


async def test_retry_is_refused_for_others_unknown_and_unfinished_batches(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, redis: Redis
) -> None:
    _, path = await make_corpus(4, seed=17)
    batch_id = await upload(api, path)

    running = await api.post(f"/v1/batches/{batch_id}/retry")  # PENDING: not finished
    assert running.status_code == 409, running.text
    assert "PENDING" in running.json()["detail"]
    foreign = await api.post(f"/v1/batches/{batch_id}/retry", headers=GLOBEX)
    assert foreign.status_code == 404
    unknown = await api.post(f"/v1/batches/{'0' * 32}/retry")
    assert unknown.status_code == 404
    assert (await api.post("/v1/batches/..%2f/retry")).status_code in {404, 422}
    assert (await api.post(f"/v1/batches/{batch_id.upper()}/retry")).status_code == 422

    await run_worker()
    before = await status_of(api, batch_id)
    assert (await api.post(f"/v1/batches/{batch_id}/retry", headers=GLOBEX)).status_code == 404
    assert await status_of(api, batch_id) == before  # a refused retry changed nothing
    assert [k async for k in redis.scan_iter(f"arq:job:retry:{batch_id}:*")] == []


async def until(browser: DevTools, expression: str) -> object:
    """Poll a JS expression until it is truthy; the test's timeout bounds the wait."""
    while not (value := await browser.js(expression)):
        assert await browser.js("document.getElementById('error').textContent") == ""
        await asyncio.sleep(0.05)
    return value


@pytest.mark.timeout(240)
async def test_the_page_retries_a_batch_and_shows_each_files_tries(
    served: str,
    browser: DevTools,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
) -> None:
    corpus, path = await make_corpus(12, seed=18, mix=CLEAN)
    batch_id = await upload(api, path)
    await run_with_storage_down(settings)
    await browser.call("Page.navigate", url=f"{served}/")
    await browser.wait_for("Page.loadEventFired")
    await browser.js(f"sessionStorage.setItem('pdfqueue-token', {json.dumps(ACME_TOKEN)})")
    await browser.call("Page.navigate", url=f"{served}/batches/{batch_id}")
    await browser.wait_for("Page.loadEventFired")
    await until(browser, "document.getElementById('status').textContent === 'COMPLETED'")
    await until(browser, "!document.getElementById('retry').hidden")  # the API offers it

    await browser.js("document.getElementById('retry').click()")
    await until(browser, "document.getElementById('status').textContent === 'PROCESSING'")
    await run_worker()
    await until(browser, "document.getElementById('status').textContent === 'COMPLETED'")
    await until(browser, "document.getElementById('retry').hidden")  # nothing failed now
    rows = await browser.js(
        "Object.fromEntries([...document.querySelectorAll('#counts tr')]"
        ".map((r) => [r.cells[0].textContent, Number(r.cells[1].textContent)]))"
    )
    assert (rows["linked"], rows["failed"], rows["processed"]) == (12, 0, 12)
    tries = await until(
        browser,
        "[...document.querySelectorAll('#files tbody tr .tries')].map((t) => t.textContent)",
    )
    assert tries == ["Try 2; before: storage_unavailable."] * 12
    assert counters(await status_of(api, batch_id)) == corpus.counts()
    assert await browser.js("window.__violations") == []


@pytest.mark.timeout(240)
async def test_cli_retry_waits_for_the_new_outcome_and_says_when_there_is_nothing_to_do(
    served: str,
    capsys: pytest.CaptureFixture[str],
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
) -> None:
    corpus, batch_id = await failed_by_storage(api, make_corpus, settings)
    assert corpus.counts()["failed"] > 0  # corrupt and encrypted files: not transient

    async def work_when_retried() -> None:
        while (await status_of(api, batch_id))["status"] != "PROCESSING":  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await run_worker()

    worker = asyncio.create_task(work_when_retried())
    code, out, _ = await cli(capsys, "retry", batch_id, "--wait", "--json", url=served)
    await worker
    summary = json.loads(out)
    assert summary["status"] == "COMPLETED"
    assert summary["retries"] == 1
    assert counters(summary) == corpus.counts()
    assert code == EXIT_FILES_FAILED

    code, _, err = await cli(capsys, "retry", batch_id, url=served)
    assert code == EXIT_ERROR
    assert "failed for a reason a retry may fix" in err
    assert f"`pdfqueue retry {batch_id} --all-failed` re-runs them anyway" in err
    code, out, _ = await cli(capsys, "retry", batch_id, "--all-failed", "--json", url=served)
    assert code == EXIT_OK
    assert json.loads(out)["retries"] == 2
    await run_worker()
    assert counters(await status_of(api, batch_id)) == corpus.counts()


async def cli(capsys: pytest.CaptureFixture[str], *argv: str, url: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (the API serves from this event loop): (code, stdout, stderr)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, [*argv, "--url", url, "--token", ACME_TOKEN])
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


@pytest.mark.kube
@pytest.mark.timeout(300)
@pytest.mark.parametrize("operator_late", [False, True], ids=["operator-up", "operator-late"])
async def test_a_retried_batchs_pdfbatch_is_unfinished_again_then_finished_with_new_counts(
    kube: Cluster,
    api_kubeconfig: Path,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
    operator_late: bool,
) -> None:
    """`operator_late`: the operator first sees the object once its batch has ended (it was
    down, or its watch started late, as kopf's does when the API server is slow)."""
    from pdfqueue_api.app import create_app

    corpus, path = await make_corpus(12, seed=19, mix=CLEAN)
    ns = kube.system_ns  # the API's Role lets it create PdfBatches there and nowhere else
    operator = partial(start_operator, ns, PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=f"{ns}:*")
    if not operator_late:
        await operator()
    k8s = settings.model_copy(
        update={"kubernetes_namespace": ns, "kubeconfig": str(api_kubeconfig)}
    )
    app = create_app(k8s)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://pdfqueue.test", headers=ACME
        ) as api,
    ):
        batch_id = await upload(api, path)
        name = f"batch-{batch_id}"
        await run_with_storage_down(settings)
        if operator_late:
            await operator()
        first = await phase_when(kube, ns, name, "COMPLETED")
        assert (first["status"]["failed"], first["status"]["linked"]) == (12, 0)
        assert finished(first)["status"] == "True"

        assert (await api.post(f"/v1/batches/{batch_id}/retry")).status_code == 202
        running = await phase_when(kube, ns, name, "PROCESSING")
        assert finished(running)["status"] == "False"
        await run_worker()
        done = await phase_when(kube, ns, name, "COMPLETED")
    assert (done["status"]["failed"], done["status"]["linked"]) == (0, 12)
    assert done["status"]["processed"] == 12
    assert finished(done) == {**finished(done), "status": "True", "reason": "Completed"}
    assert counters(await summary(settings, batch_id)) == corpus.counts()


class CutShort(Redis):
    """The real Redis, but once `cut_after` is set, the call that brings it to 0 is carried
    out and then raises: the pass that made it is cut off right there (its step timeout, a
    lost connection, a shutdown)."""

    cut_after: int | None = None

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        result = await super().execute_command(*args, **options)
        if self.cut_after is not None:
            self.cut_after -= 1
            if self.cut_after == 0:
                self.cut_after = None
                raise RedisConnectionError("cut off after this call")
        return result


class RetryInside(Kube):
    """The operator's own client to the real API server, through which the API's retry
    lands once, right after the call named `after` returns: an interleaving that a loaded
    machine produces by chance, here every time. With `cut`, the pass is then cut off
    right after its next Redis call."""

    retry: Callable[[], Awaitable[None]]
    redis: CutShort
    after: str | None = None
    cut = False

    async def _then(self, call: str) -> None:
        if self.after == call:
            self.after = None
            await self.retry()
            if self.cut:
                self.cut, self.redis.cut_after = False, 1

    async def get_pdfbatch(self, ref: ObjectRef) -> dict[str, Any] | None:
        found = await super().get_pdfbatch(ref)
        await self._then("get_pdfbatch")
        return found

    async def patch_pdfbatch_status(
        self, ref: ObjectRef, status: Mapping[str, Any], resource_version: str
    ) -> bool:
        done = await super().patch_pdfbatch_status(ref, status, resource_version)
        await self._then("patch_pdfbatch_status")
        return done


@dataclass
class Adopted:
    """An API upload, its PdfBatch in a namespace of its own, and the operator's reconciler
    driven step by step against the real Redis, PostgreSQL and API server."""

    kube: Cluster
    namespace: str
    batch_id: str
    settings: Settings
    stores: Stores
    client: RetryInside
    reconciler: BatchReconciler

    @property
    def name(self) -> str:
        return f"batch-{self.batch_id}"

    async def shown(self) -> dict[str, Any]:
        obj = await self.kube.get("pdfbatch", self.name, self.namespace)
        assert obj is not None
        return obj

    async def seen(self) -> None:
        """What kopf's create (or resume) handler does with the object."""
        await self.reconciler.ensure(PdfBatchObject.from_body(await self.shown()))

    async def end(self) -> None:
        await run_with_storage_down(self.settings)

    async def mirror(self) -> None:
        """One pass of the operator's status loop."""
        await self.reconciler.mirror()

    async def cut(self) -> None:
        self.client.cut = True

    async def retry(self) -> None:
        """What `POST /v1/batches/{id}/retry` does."""
        await self.stores.lifecycle.requeue(self.batch_id, all_failed=False)

    async def tracked(self) -> bool:
        tracking = keys.operator_batches(self.settings.queue_name)
        return bool(await self.stores.redis.hexists(tracking, self.batch_id))  # type: ignore[misc]


@pytest.fixture
async def adopted(
    kube: Cluster,
    namespace: str,
    operator_kubeconfig: Path,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    settings: Settings,
    storage: Storage,
) -> AsyncIterator[Adopted]:
    _, path = await make_corpus(12, seed=19, mix=CLEAN)
    batch_id = await upload(api, path)
    source = storage.url(f"uploads/{batch_id}.zip")
    await kube.apply(manifest(batch_id, source, "acme"), namespace=namespace)
    config = settings.model_copy(update={"operator_namespace_tenants": {namespace: "*"}})
    redis = CutShort.from_url(settings.redis_url)
    stores = await Stores.open(config, OPERATOR, redis)
    client = RetryInside(await connect(str(operator_kubeconfig)))
    client.redis = redis
    reconciler = BatchReconciler(
        config, stores.redis, stores.batches, stores.lifecycle, stores.storage, client
    )
    scene = Adopted(kube, namespace, batch_id, settings, stores, client, reconciler)
    client.retry = scene.retry
    try:
        yield scene
    finally:
        await client.close()
        await stores.close()
        await redis.aclose()


@pytest.mark.kube
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param("end seen mirror retry", id="ended-before-its-object-was-seen"),
        pytest.param("end seen retry", id="retried-before-the-first-mirror-pass"),
        pytest.param("seen end retry-after:get_pdfbatch", id="retried-as-the-mirror-reads-its-end"),
        pytest.param(
            "seen end retry-after:patch_pdfbatch_status", id="retried-as-its-end-is-shown"
        ),
        pytest.param(
            "seen end cut retry-after:patch_pdfbatch_status",
            id="retried-as-its-end-is-shown-and-the-pass-cut-off",
        ),
    ],
)
async def test_a_pdfbatch_follows_a_retry_whatever_the_interleaving(
    adopted: Adopted, run_worker: RunWorker, steps: str
) -> None:
    for step in steps.split():
        if step.startswith("retry-after:"):
            adopted.client.after = step.partition(":")[2]
            await adopted.mirror()
            assert adopted.client.after is None  # the retry did land there
            assert (adopted.client.cut, adopted.client.redis.cut_after) == (False, None)
        else:
            await getattr(adopted, step)()
        if step == "mirror":
            ended = (await adopted.shown()).get("status") or {}
            assert (ended.get("phase"), ended.get("failed")) == ("COMPLETED", 12)
    await adopted.mirror()
    running = await adopted.shown()
    assert running["status"]["phase"] == "PROCESSING"
    assert (running["status"]["processed"], running["status"]["failed"]) == (0, 0)
    assert finished(running)["status"] == "False"

    await run_worker()
    await adopted.mirror()
    done = await adopted.shown()
    assert (done["status"]["phase"], done["status"]["processed"]) == ("COMPLETED", 12)
    assert (done["status"]["linked"], done["status"]["failed"]) == (12, 0)
    assert finished(done) == {**finished(done), "status": "True", "reason": "Completed"}
    assert not await adopted.tracked()  # mirrored to its end, and no longer followed


def finished(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = obj["status"]["conditions"]
    found: dict[str, Any] = next(c for c in conditions if c["type"] == "Finished")
    return found


async def phase_when(kube: Cluster, ns: str, name: str, phase: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await kube.get("pdfbatch", name, ns)
        return obj if obj and (obj.get("status") or {}).get("phase") == phase else None

    found: dict[str, Any] = await wait_until_async(probe, phase, 60)
    return found


async def summary(settings: Settings, batch_id: str) -> dict[str, Any]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        row = await conn.fetchrow("SELECT * FROM pdfqueue_batches WHERE id = $1", batch_id)
    finally:
        await conn.close()
    return dict(row)


async def test_event_stream_of_a_retried_batch_names_the_round(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, settings: Settings
) -> None:
    _, batch_id = await failed_by_storage(api, make_corpus, settings, n=8)
    events = f"/v1/batches/{batch_id}/events"
    seen = {"Last-Event-ID": "COMPLETED:8"}  # the first completion, as a client saw it
    assert (await api.get(events, headers=seen)).status_code == 204

    assert (await api.post(f"/v1/batches/{batch_id}/retry")).status_code == 202
    await run_worker()
    answer = await api.get(events, headers=seen)
    assert answer.status_code == 200  # the new completion is news to that client
    ids = [line[4:] for line in answer.text.splitlines() if line.startswith("id: ")]
    assert ids == ["COMPLETED:8:r1"]
    assert (await api.get(events, headers={"Last-Event-ID": ids[0]})).status_code == 204


async def test_a_round_whose_finisher_died_before_postgresql_does_not_block_the_next(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
    db: asyncpg.Connection,
) -> None:
    corpus, batch_id = await failed_by_storage(api, make_corpus, settings)
    assert (await api.post(f"/v1/batches/{batch_id}/retry")).status_code == 202
    await run_worker()
    # Redis says COMPLETED; the worker that completed it died before writing PostgreSQL
    await db.execute(
        "UPDATE pdfqueue_batches SET status = 'PROCESSING', completed_at = NULL WHERE id = $1",
        batch_id,
    )
    again = await api.post(f"/v1/batches/{batch_id}/retry", params={"all_failed": "true"})
    assert again.status_code == 202, again.text
    assert again.json()["retries"] == 2
    await run_worker()
    status = await status_of(api, batch_id)
    assert (status["status"], status["retries"]) == ("COMPLETED", 2)
    assert counters(status) == corpus.counts()
