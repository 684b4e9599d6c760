"""The operator against a real API server: PdfBatch manifests in, batches processed, status out."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import Eraser
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.postgres.retention import RetentionStore
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import wait_until_async
from tests.support.helpers import ACME, MakeCorpus, RunWorker, upload
from tests.support.kube_env import Cluster, StartOperator

pytestmark = pytest.mark.kube
EXAMPLES = Path(__file__).parents[1] / "k8s" / "examples"
COLUMNS = ["NAME", "PHASE", "FILES", "PROCESSED", "LINKED", "FAILED", "AGE"]


def example(source: str, name: str | None = None) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / "pdfbatch.yaml").read_text())
    manifest["spec"]["source"] = source
    if name:
        manifest["metadata"]["name"] = name
    return manifest


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), None)


async def status_when(
    kube: Cluster, namespace: str, name: str, ok: Any, what: str, timeout_s: float = 30
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await kube.get("pdfbatch", name, namespace)
        return obj if obj and ok(obj.get("status") or {}, obj) else None

    return await wait_until_async(probe, what, timeout_s)


def accepted(status: dict[str, Any], obj: dict[str, Any]) -> bool:
    return ((condition(obj, "Accepted") or {}).get("status")) == "True"


async def summary_of(settings: Settings, redis: Redis, batch_id: str) -> Any:
    pool = await connect(settings.database_url, max_size=1)
    try:
        lifecycle = lifecycle_over(pool, redis, settings)
        found = await lifecycle.reads.read(batch_id)
        return found.summary if found is not None else None
    finally:
        await pool.close()


async def test_applied_manifest_is_queued_processed_and_shown(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    storage: Storage,
    run_worker: RunWorker,
) -> None:
    corpus, path = await make_corpus(24, seed=5)
    await storage.put("incoming/hr/resumes-2024-06.zip", path.read_bytes())
    await start_operator(namespace)
    manifest = example(storage.url("incoming/hr/resumes-2024-06.zip"))
    await kube.apply(manifest, namespace=namespace)
    name = manifest["metadata"]["name"]

    queued = await status_when(kube, namespace, name, accepted, "queued")
    assert queued["status"]["batchId"] == queued["metadata"]["uid"].replace("-", "")
    await run_worker()
    done = await status_when(
        kube, namespace, name, lambda s, _: s.get("phase") == "COMPLETED", "completed"
    )

    status, expected = done["status"], corpus.counts()
    assert status["totalFiles"] == status["processed"] == 24
    assert status["linked"] == expected["linked"] > 0
    assert status["skippedNoMatch"] == expected["skipped_no_match"]
    assert status["skippedAlreadyExists"] == expected["skipped_already_exists"]
    assert status["failed"] == expected["failed"]
    assert status["ignored"] == 1
    assert status["observedGeneration"] == 1
    assert condition(done, "Finished") == {
        **condition(done, "Finished"),
        "status": "True",
        "reason": "Completed",
    }  # type: ignore[dict-item]

    table = (await kube.kubectl("get", "pdfbatches", "-n", namespace)).out.splitlines()
    assert table[0].split() == COLUMNS
    row = dict(zip(COLUMNS, table[1].split(), strict=True))
    assert row | {"AGE": ""} == {
        "NAME": name,
        "PHASE": "COMPLETED",
        "FILES": "24",
        "PROCESSED": "24",
        "LINKED": str(expected["linked"]),
        "FAILED": str(expected["failed"]),
        "AGE": "",
    }
    short = await kube.kubectl("get", "pdfb", name, "-n", namespace, "-o", "name")
    assert short.out.strip() == f"pdfbatch.pdfqueue.io/{name}"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("missing-source.yaml", "spec.source: Required value"),
        ("http-source.yaml", "spec.source in body should match '^s3://"),
        ("unknown-field.yaml", 'unknown field "spec.bucket"'),
    ],
)
async def test_invalid_manifests_are_rejected_by_the_api_server(
    kube: Cluster, namespace: str, manifest: str, message: str
) -> None:
    path = EXAMPLES / "invalid" / manifest
    run = await kube.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert run.rc != 0
    assert message in run.err
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    assert await kube.get("pdfbatch", name, namespace) is None


async def test_spec_is_immutable(kube: Cluster, namespace: str) -> None:
    await kube.apply(example("s3://pdfqueue/a.zip"), namespace=namespace)
    run = await kube.apply(example("s3://pdfqueue/b.zip"), namespace=namespace, check=False)
    assert run.rc != 0
    assert "spec is immutable" in run.err


async def test_source_outside_the_bucket_fails_and_a_missing_one_is_waited_for(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    storage: Storage,
) -> None:
    await start_operator(namespace)
    outside = {"elsewhere": "s3://elsewhere/resumes.zip", "other-prefix": "s3://pdfqueue/x/r.zip"}
    for name, source in outside.items():
        await kube.apply(example(source, name), namespace=namespace)
    for name, source in outside.items():
        failed = await status_when(
            kube, namespace, name, lambda s, _: s.get("phase") == "FAILED", "failed"
        )
        reason = condition(failed, "Accepted")
        assert reason is not None
        assert (reason["status"], reason["reason"]) == ("False", "SourceOutsideBucket")
        assert f"source {source!r} is not inside the configured bucket" in reason["message"]
        assert failed["status"]["message"] == reason["message"]
        assert "batchId" not in failed["status"]

    source = storage.url("incoming/hr/late.zip")
    await kube.apply(example(source, "late"), namespace=namespace)

    def waiting(status: dict[str, Any], obj: dict[str, Any]) -> bool:
        found = condition(obj, "Accepted") or {}
        return status.get("phase") == "PENDING" and found.get("reason") == "SourceNotFound"

    missing = await status_when(kube, namespace, "late", waiting, "waiting for its ZIP")
    assert f"{source} does not exist (yet)" in missing["status"]["message"]
    _, path = await make_corpus(3, seed=9)
    await storage.put("incoming/hr/late.zip", path.read_bytes())
    found = await status_when(kube, namespace, "late", accepted, "queued once the ZIP exists")
    assert found["status"]["phase"] == "PENDING"
    assert found["status"]["batchId"]


@pytest.mark.settings(pdfs_per_job=4)
async def test_deleting_a_pdfbatch_cancels_its_queued_jobs_even_if_the_operator_was_down(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    storage: Storage,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
) -> None:
    _, path = await make_corpus(12, seed=11)
    await storage.put("incoming/hr/cancel-me.zip", path.read_bytes())
    operator = await start_operator(namespace)
    await kube.apply(
        example(storage.url("incoming/hr/cancel-me.zip"), "cancel-me"), namespace=namespace
    )
    batch_id = (await status_when(kube, namespace, "cancel-me", accepted, "queued"))["status"][
        "batchId"
    ]
    await run_worker(max_burst_jobs=1)  # only ingest runs: the PDFs are now queued jobs

    async def queued(batch: str) -> int:
        return len(
            [m async for m, _ in redis.zscan_iter(settings.queue_name, match=f"process:{batch}:*")]
        )

    assert await queued(batch_id) == 3  # 12 PDFs, 4 per job
    await kube.kubectl("delete", "pdfbatch", "cancel-me", "-n", namespace)

    async def cancelled(batch: str) -> bool:
        """CANCELLED with no job of it left queued. `cancel` sets the status first and then
        drops the jobs, so the status alone does not say the queue is clean yet."""
        summary = await summary_of(settings, redis, batch)
        return (
            summary.status == "CANCELLED"
            and await queued(batch) == 0
            and await redis.zscore(settings.queue_name, keys.ingest_job(batch)) is None
        )

    await wait_until_async(lambda: cancelled(batch_id), "cancelled")

    # With the operator down, deletion is not blocked (no finalizer); it cancels on return.
    await kube.apply(
        example(storage.url("incoming/hr/cancel-me.zip"), "while-down"), namespace=namespace
    )
    second = (await status_when(kube, namespace, "while-down", accepted, "queued"))["status"][
        "batchId"
    ]
    assert second != batch_id  # another object, another batch
    await operator.stop()
    await kube.kubectl("delete", "pdfbatch", "while-down", "-n", namespace, "--timeout=15s")
    assert await kube.get("pdfbatch", "while-down", namespace) is None
    assert await redis.zscore(settings.queue_name, keys.ingest_job(second)) is not None
    await start_operator(namespace)
    await wait_until_async(lambda: cancelled(second), "cancelled after the operator came back")


async def test_api_uploads_get_a_pdfbatch_the_operator_only_mirrors(
    kube: Cluster,
    api_kubeconfig: Path,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    settings: Settings,
    storage: Storage,
    redis: Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pdfqueue_api.app import create_app

    corpus, path = await make_corpus(10, seed=13)
    ns = kube.system_ns  # the API's Role lets it create PdfBatches there and nowhere else
    await start_operator(ns, PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=f"{ns}:*")
    k8s = settings.model_copy(
        update={"kubernetes_namespace": ns, "kubeconfig": str(api_kubeconfig)}
    )
    async with api_client(create_app(k8s)) as api:
        batch_id = await upload(api, path)
    name = f"batch-{batch_id}"
    obj = await kube.get("pdfbatch", name, ns)
    assert obj is not None
    assert obj["metadata"]["annotations"]["pdfqueue.io/batch-id"] == batch_id
    assert obj["spec"] == {"source": storage.url(f"uploads/{batch_id}.zip"), "tenant": "acme"}

    mirrored = await status_when(kube, ns, name, accepted, "mirrored")
    assert mirrored["status"]["batchId"] == batch_id
    assert await redis.zcard(settings.queue_name) == 1  # the API's ingest job, not a second one
    await run_worker()
    done = await status_when(
        kube, ns, name, lambda s, _: s.get("phase") == "COMPLETED", "completed"
    )
    assert done["status"]["linked"] == corpus.counts()["linked"]
    await kube.kubectl("delete", "pdfbatch", name, "-n", ns)

    # An unreachable API server costs the upload nothing but a logged warning.
    broken = yaml.safe_load(api_kubeconfig.read_text())
    broken["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    dead = api_kubeconfig.with_name("dead.kubeconfig")
    dead.write_text(yaml.safe_dump(broken))
    caplog.set_level(logging.WARNING, logger="pdfqueue_api.pdfbatches")
    async with api_client(create_app(k8s.model_copy(update={"kubeconfig": str(dead)}))) as api:
        assert await upload(api, path)
    assert "PdfBatch not created" in caplog.text


@asynccontextmanager
async def api_client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The ASGI app with its lifespan, as tenant acme."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://pdfqueue.test",
            headers=ACME,
            timeout=30,
        ) as client,
    ):
        yield client


@pytest.mark.parametrize(
    ("account", "verb", "resource", "namespace", "allowed"),
    [
        ("pdfqueue-operator", "patch", "deployments.apps --subresource=scale", "default", True),
        ("pdfqueue-operator", "patch", "deployments.apps", "default", False),
        ("pdfqueue-operator", "patch", "pdfbatches.pdfqueue.io --subresource=status", "x", True),
        ("pdfqueue-operator", "update", "pdfbatches.pdfqueue.io --subresource=status", "x", False),
        ("pdfqueue-operator", "create", "pdfbatches.pdfqueue.io", "default", False),
        ("pdfqueue-operator", "patch", "pods", "default", True),
        ("pdfqueue-operator", "delete", "pods", "default", False),
        ("pdfqueue-operator", "get", "secrets", "default", False),
        ("pdfqueue-api", "create", "pdfbatches.pdfqueue.io", "", True),
        ("pdfqueue-api", "create", "pdfbatches.pdfqueue.io", "default", False),
        ("pdfqueue-api", "get", "pdfbatches.pdfqueue.io", "", False),
    ],
)
async def test_service_accounts_hold_only_what_they_need(
    kube: Cluster, account: str, verb: str, resource: str, namespace: str, allowed: bool
) -> None:
    """An empty namespace stands for the ServiceAccounts' own (where the API's Role is)."""
    run = await kube.kubectl(
        "auth",
        "can-i",
        verb,
        *resource.split(),
        "-n",
        namespace or kube.system_ns,
        f"--as=system:serviceaccount:{kube.system_ns}:{account}",
        check=False,
    )
    assert run.out.strip() == ("yes" if allowed else "no"), run.err


async def completed_batch(
    kube: Cluster,
    namespace: str,
    storage: Storage,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    name: str,
) -> str:
    """Apply a PdfBatch, run it to its end, and age its end past retention's settle time."""
    _, path = await make_corpus(8, seed=13)
    await storage.put(f"incoming/hr/{name}.zip", path.read_bytes())
    await kube.apply(example(storage.url(f"incoming/hr/{name}.zip"), name), namespace=namespace)
    await status_when(kube, namespace, name, accepted, "queued")
    await run_worker()
    done = await status_when(
        kube, namespace, name, lambda s, _: s.get("phase") == "COMPLETED", "completed"
    )
    assert done["status"]["processed"] == 8
    batch_id: str = done["status"]["batchId"]
    return batch_id


@asynccontextmanager
async def eraser_of(
    settings: Settings, redis: Redis, storage: Storage, batch_id: str
) -> AsyncIterator[Eraser]:
    """An Eraser, the batch's end aged a day (past the settle time of its last jobs)."""
    pool = await connect(settings.database_url, max_size=2)
    try:
        await pool.execute(
            "UPDATE pdfqueue_batches SET completed_at = now() - interval '1 day' WHERE id = $1",
            batch_id,
        )
        lifecycle = lifecycle_over(pool, redis, settings)
        yield Eraser(RetentionStore.of(pool, settings), lifecycle, storage, settings)
    finally:
        await pool.close()


def trimmed(obj: dict[str, Any], phase: str, batch_id: str) -> None:
    """The status of a removed batch: its phase and time, and nothing counted from files."""
    status = obj["status"]
    assert status["phase"] == phase
    assert status["batchId"] == batch_id
    assert not {"totalFiles", "processed", "linked", "failed", "ignored"} & set(status)
    assert "kubectl delete" in status["message"]
    removed = condition(obj, "Removed")
    assert removed is not None
    assert removed["status"] == "True"
    assert removed["reason"] == phase.title()
    assert removed["lastTransitionTime"] in status["message"]


async def test_a_purged_batch_is_trimmed_not_run_again_when_the_operator_resumes(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    storage: Storage,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
) -> None:
    """Retention removes the batch's rows and its source under incoming/ while the operator
    is down. On resume the operator used to register it again (SourceNotFound for ever, or a
    second run where the source still existed); then it left the object's counters as they
    were. Now the object says PURGED, with the audit time, and keeps no counters."""
    operator = await start_operator(namespace)
    batch_id = await completed_batch(kube, namespace, storage, make_corpus, run_worker, "purge-me")
    await operator.stop()

    async with eraser_of(settings, redis, storage, batch_id) as eraser:
        report = await eraser.purge(older_than_s=3600, tenant="hr")
        assert report.removed.batches == 1
    assert not await storage.exists("incoming/hr/purge-me.zip")

    await start_operator(namespace)  # resumes every object it finds
    kept = await status_when(
        kube, namespace, "purge-me", lambda s, _: s.get("phase") == "PURGED", "trimmed"
    )
    trimmed(kept, "PURGED", batch_id)
    await kube.apply(  # a new object: proof the operator has reconciled since
        example(storage.url("incoming/hr/purge-me.zip"), "after-purge"), namespace=namespace
    )
    await status_when(
        kube, namespace, "after-purge", lambda s, _: "SourceNotFound" in str(s), "reconciled"
    )
    assert await pool_free_batch(settings, batch_id)
    table = (await kube.kubectl("get", "pdfbatches", "purge-me", "-n", namespace)).out
    assert table.splitlines()[1].split()[1] == "PURGED"


async def test_an_erased_batch_is_trimmed_by_the_running_operator(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    make_corpus: MakeCorpus,
    storage: Storage,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
) -> None:
    """An erasure while the operator runs (the batch long untracked) trims the object from
    the audit trail, and it is not run again when the operator next resumes."""
    await start_operator(namespace)
    batch_id = await completed_batch(kube, namespace, storage, make_corpus, run_worker, "erase-me")
    async with eraser_of(settings, redis, storage, batch_id) as eraser:
        erased = await eraser.erase_batch(batch_id, tenant="hr")
        assert erased.done
    kept = await status_when(
        kube, namespace, "erase-me", lambda s, _: s.get("phase") == "ERASED", "trimmed"
    )
    trimmed(kept, "ERASED", batch_id)
    assert await pool_free_batch(settings, batch_id)


async def pool_free_batch(settings: Settings, batch_id: str) -> bool:
    """No batch row came back: the purged batch was not registered again."""
    pool = await connect(settings.database_url, max_size=1)
    try:
        count = await pool.fetchval("SELECT count(*) FROM pdfqueue_batches WHERE id = $1", batch_id)
    finally:
        await pool.close()
    return count == 0
