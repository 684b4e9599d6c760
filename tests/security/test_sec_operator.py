"""Attacks by namespace users on the operator: forged batch ids, tenants and sources; leaks.

Each test runs the real operator (its own ServiceAccount) against the session's API server,
and proves the victim batch was neither mirrored, hijacked nor cancelled, and that nothing was
queued or registered for a refused object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import BatchConflict, InvalidBatchId, SourceOutsideBucket, UnsafeSource
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import wait_until_async
from tests.support.helpers import GLOBEX, MakeCorpus, RunWorker, upload
from tests.support.kube_env import Cluster, StartOperator


def pdfbatch(name: str, source: str, tenant: str | None = None, batch_id: str | None = None) -> Any:
    manifest: dict[str, Any] = {
        "apiVersion": "pdfqueue.io/v1alpha1",
        "kind": "PdfBatch",
        "metadata": {"name": name},
        "spec": {"source": source},
    }
    if tenant is not None:
        manifest["spec"]["tenant"] = tenant
    if batch_id is not None:
        manifest["metadata"]["annotations"] = {"pdfqueue.io/batch-id": batch_id}
    return manifest


def accepted(obj: dict[str, Any]) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Accepted"), {})


async def settled(kube: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The object once the operator has accepted or refused it."""

    async def probe() -> dict[str, Any] | None:
        obj = await kube.get("pdfbatch", name, namespace)
        return obj if obj and accepted(obj).get("status") in {"True", "False"} else None

    return await wait_until_async(probe, f"{name} accepted or refused")


async def assert_refused(kube: Cluster, namespace: str, name: str, reason: str) -> None:
    obj = await settled(kube, namespace, name)
    status = obj["status"]
    assert (accepted(obj)["status"], accepted(obj)["reason"]) == ("False", reason), status
    assert status["phase"] == "FAILED"
    assert not {"batchId", "processed", "linked", "totalFiles"} & status.keys()  # nothing mirrored


async def queue_members(redis: Redis, settings: Settings) -> set[bytes]:
    return set(await redis.zrange(settings.queue_name, 0, -1))


async def row_of(settings: Settings, batch_id: str) -> dict[str, Any] | None:
    conn = await asyncpg.connect(settings.database_url)
    try:
        row = await conn.fetchrow(
            "SELECT tenant, source_key, status, pdfbatch_uid FROM pdfqueue_batches WHERE id = $1",
            batch_id,
        )
        return dict(row) if row else None
    finally:
        await conn.close()


NewNamespace = Callable[[str], Awaitable[str]]


@pytest.fixture
async def new_namespace(kube: Cluster) -> AsyncIterator[NewNamespace]:
    """Create more namespaces for one test (deleted after it)."""
    made: list[str] = []

    async def create(prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        await kube.kubectl("create", "namespace", name)
        made.append(name)
        return name

    yield create
    for name in made:
        await kube.kubectl("delete", "namespace", name, "--wait=false", check=False)


async def victim_batch(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, seed: int
) -> str:
    """acme's batch, uploaded through the API, its PDFs queued as process jobs (not run)."""
    _, path = await make_corpus(8, seed=seed)
    batch_id = await upload(api, path)
    await run_worker(max_burst_jobs=1)  # ingest only
    return batch_id


@pytest.mark.kube
@pytest.mark.timeout(300)  # a busy machine runs operators and kubectl slowly
@pytest.mark.settings(pdfs_per_job=2)
async def test_forged_batch_id_annotations_neither_mirror_hijack_nor_cancel(
    kube: Cluster,
    new_namespace: NewNamespace,
    start_operator: StartOperator,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    redis: Redis,
    settings: Settings,
    storage: Storage,
) -> None:
    victim = await victim_batch(api, make_corpus, run_worker, seed=21)
    upload_url = storage.url(f"uploads/{victim}.zip")
    attacker_ns, acme_ns = await new_namespace("globex"), await new_namespace("acme")
    tenants = f"{attacker_ns}:globex,{acme_ns}:acme"
    await start_operator(attacker_ns, PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=tenants)
    await start_operator(acme_ns, PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=tenants)
    before = await queue_members(redis, settings)
    assert len([m for m in before if m.startswith(f"process:{victim}:".encode())]) == 4

    # acme's own object adopts acme's batch: the one legitimate binding.
    await kube.apply(pdfbatch("mine", upload_url, "acme", victim), namespace=acme_ns)
    mine = await settled(kube, acme_ns, "mine")
    assert accepted(mine)["status"] == "True"
    assert mine["status"]["batchId"] == victim
    owner = (await row_of(settings, victim) or {})["pdfbatch_uid"]
    assert owner == mine["metadata"]["uid"]

    # Another tenant names the batch; a second object of the same tenant tries to take it over;
    # ids that are globs or not ids at all.
    forged = {
        "hijack": (attacker_ns, pdfbatch("hijack", upload_url, None, victim), "BatchNotAdoptable"),
        "again": (acme_ns, pdfbatch("again", upload_url, "acme", victim), "BatchNotAdoptable"),
        "glob": (attacker_ns, pdfbatch("glob", upload_url, None, "*"), "InvalidBatchId"),
        "glob2": (
            acme_ns,
            pdfbatch("glob2", upload_url, None, victim[:31] + "?"),
            "InvalidBatchId",
        ),
        "empty": (acme_ns, pdfbatch("empty", upload_url, None, ""), "InvalidBatchId"),
        "upper": (acme_ns, pdfbatch("upper", upload_url, None, victim.upper()), "InvalidBatchId"),
    }
    for namespace, manifest, _ in forged.values():
        await kube.apply(manifest, namespace=namespace)
    for name, (namespace, _, reason) in forged.items():
        await assert_refused(kube, namespace, name, reason)
    assert await queue_members(redis, settings) == before  # nothing queued
    assert (await row_of(settings, victim) or {})["pdfbatch_uid"] == owner  # still mine
    for bad in ("*", victim[:31] + "?", victim.upper(), ""):
        assert await row_of(settings, bad) is None  # no row for a forged id

    # Deleting the forged objects cancels nothing, not even with the operator down meanwhile.
    for name, (namespace, _, _) in forged.items():
        await kube.kubectl("delete", "pdfbatch", name, "-n", namespace)
    await kube.apply(pdfbatch("late", upload_url, None, victim), namespace=attacker_ns)
    await assert_refused(kube, attacker_ns, "late", "BatchNotAdoptable")
    await kube.kubectl("delete", "pdfbatch", "late", "-n", attacker_ns)
    status = await api.get(f"/v1/batches/{victim}")
    assert status.status_code == 200
    assert status.json()["status"] == "PROCESSING"
    assert await queue_members(redis, settings) == before  # not one job dropped

    # The owner's object still mirrors the batch, and its deletion alone cancels it.
    await kube.kubectl("delete", "pdfbatch", "mine", "-n", acme_ns)

    async def cancelled() -> bool:
        # the status turns CANCELLED before the cancel drops the batch's queued jobs
        got = (await api.get(f"/v1/batches/{victim}")).json()
        queued = {m for m in await queue_members(redis, settings) if victim.encode() in m}
        return got["status"] == "CANCELLED" and not queued

    await wait_until_async(cancelled, "cancelled by its owner's deletion, its jobs dropped")


@pytest.mark.kube
@pytest.mark.timeout(300)  # a busy machine runs operators and kubectl slowly
async def test_tenant_comes_from_the_namespace_and_sources_from_its_own_folder(
    kube: Cluster,
    namespace: str,
    new_namespace: NewNamespace,
    start_operator: StartOperator,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    redis: Redis,
    settings: Settings,
    storage: Storage,
) -> None:
    _, path = await make_corpus(3, seed=23)
    victim = await upload(api, path)
    await redis.delete(keys.batch(victim))  # its live state expired
    for key in ("incoming/acme/theirs.zip", "incoming/globex/ours.zip", "incoming/loose.zip"):
        await storage.put(key, path.read_bytes())
    unmapped = await new_namespace("unmapped")
    await start_operator(namespace, PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=f"{namespace}:globex")
    await start_operator(unmapped, PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=f"{namespace}:globex")
    before = await queue_members(redis, settings)

    refused = {
        "other-tenant": (
            pdfbatch("other-tenant", storage.url("incoming/globex/ours.zip"), "acme"),
            "TenantNotAllowed",
        ),
        "upload": (pdfbatch("upload", storage.url(f"uploads/{victim}.zip")), "SourceNotAllowed"),
        "their-folder": (
            pdfbatch("their-folder", storage.url("incoming/acme/theirs.zip")),
            "SourceNotAllowed",
        ),
        "loose": (pdfbatch("loose", storage.url("incoming/loose.zip")), "SourceNotAllowed"),
        "linked": (pdfbatch("linked", storage.url("pdfs/1/x.pdf")), "SourceNotAllowed"),
        # the expired live state of acme's batch must not come back under globex
        "restore": (
            pdfbatch("restore", storage.url(f"uploads/{victim}.zip"), "globex", victim),
            "BatchNotAdoptable",
        ),
    }
    for manifest, _ in refused.values():
        await kube.apply(manifest, namespace=namespace)
    await kube.apply(pdfbatch("stray", storage.url("incoming/globex/ours.zip")), namespace=unmapped)
    for name, (_, reason) in refused.items():
        await assert_refused(kube, namespace, name, reason)
    await assert_refused(kube, unmapped, "stray", "TenantNotAllowed")
    assert await queue_members(redis, settings) == before
    assert not await redis.exists(keys.batch(victim))  # not re-created, under any tenant
    assert (await api.get(f"/v1/batches/{victim}", headers=GLOBEX)).status_code == 404
    assert (await row_of(settings, victim) or {})["pdfbatch_uid"] is None

    # The namespace's own folder works, filed under the namespace's tenant (spec.tenant omitted
    # is the CRD default, which means "this namespace's tenant").
    await kube.apply(pdfbatch("ours", storage.url("incoming/globex/ours.zip")), namespace=namespace)
    ours = await settled(kube, namespace, "ours")
    assert accepted(ours)["status"] == "True"
    batch_id = ours["status"]["batchId"]
    assert await row_of(settings, batch_id) == {
        "tenant": "globex",
        "source_key": "incoming/globex/ours.zip",
        "status": "PENDING",
        "pdfbatch_uid": ours["metadata"]["uid"],
    }
    assert await redis.hget(keys.batch(batch_id), "tenant") == b"globex"
    assert await queue_members(redis, settings) == before | {keys.ingest_job(batch_id).encode()}
    assert (await api.get(f"/v1/batches/{batch_id}", headers=GLOBEX)).status_code == 200
    assert (await api.get(f"/v1/batches/{batch_id}")).status_code == 404  # acme


@pytest.mark.kube
@pytest.mark.timeout(300)  # a busy machine runs operators and kubectl slowly
async def test_sources_are_compared_by_path_segments(
    kube: Cluster,
    namespace: str,
    start_operator: StartOperator,
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    redis: Redis,
    settings: Settings,
    storage: Storage,
) -> None:
    _, path = await make_corpus(3, seed=25)
    victim = await upload(api, path)
    await storage.put("incoming/hr/ok.zip", path.read_bytes())
    await start_operator(namespace)  # namespace -> hr
    base = storage.url("incoming/hr")
    sources = {
        "dotdot": f"{base}/../../uploads/{victim}.zip",
        "dot": f"{base}/./ok.zip",
        "empty": f"{base}//ok.zip",
        "trailing": f"{base}/",
        "enc-dot": f"{base}/%2e%2E/%2E%2e/uploads/{victim}.zip",
        "enc-slash": f"{base}/..%2F..%2fuploads%2F{victim}.zip",
        "enc-backslash": f"{base}/..%5c..%5Cuploads%5c{victim}.zip",
        "backslash": f"{base}/..\\..\\uploads\\{victim}.zip",
        "tab": f"{base}/ok.zip\t",
        "query": f"{base}/ok.zip?versionId=1",
    }
    before = await queue_members(redis, settings)
    for name, source in sources.items():
        await kube.apply(pdfbatch(name, source), namespace=namespace)
    for name in sources:
        await assert_refused(kube, namespace, name, "UnsafeSource")
    prefix_twin = storage.url("incoming/hrx/ok.zip")  # a text prefix of another tenant's folder
    await kube.apply(pdfbatch("twin", prefix_twin), namespace=namespace)
    await assert_refused(kube, namespace, "twin", "SourceNotAllowed")
    assert await queue_members(redis, settings) == before
    assert (await row_of(settings, victim) or {})["pdfbatch_uid"] is None
    status = (await api.get(f"/v1/batches/{victim}")).json()
    assert (status["status"], status["processed"]) == ("PENDING", 0)


def test_key_from_url_compares_segments(storage: Storage) -> None:
    base = storage.url("")
    assert storage.key_from_url(f"{base}incoming/hr/a.zip") == "incoming/hr/a.zip"
    assert storage.key_from_url(f"{base}incoming/hr/a.zip;v=1") == "incoming/hr/a.zip;v=1"
    bucket_prefix = base.removeprefix("s3://").rstrip("/")
    for outside in (f"s3://{bucket_prefix}x/a.zip", "s3://pdfqueue/a.zip", base.rstrip("/")):
        with pytest.raises(SourceOutsideBucket):
            storage.key_from_url(outside)
    for unsafe in ("a/../b.zip", "a/%2E%2e/b.zip", "a%2fb.zip", "a%5Cb.zip", "a\\b", "a\nb", "a/"):
        with pytest.raises(UnsafeSource):
            storage.key_from_url(base + unsafe)


@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("DELETE", ""), ("GET", "/files")])
async def test_api_refuses_anything_but_a_batch_id_in_its_paths(
    api: httpx.AsyncClient, method: str, suffix: str
) -> None:
    for bad in ("*", "%2A", "A" * 32, "0" * 31, "0" * 33, "0" * 31 + "g", "0" * 32 + "%0A"):
        response = await api.request(method, f"/v1/batches/{bad}{suffix}")
        assert response.status_code == 422, (bad, response.text)
    response = await api.request(method, f"/v1/batches/{'0' * 32}{suffix}")
    assert response.status_code == 404


def test_key_builders_refuse_anything_but_a_batch_id() -> None:
    good = "0123456789abcdef" * 2
    assert keys.process_job(good, 3) == f"process:{good}:3"
    for bad in ("*", "", good.upper(), good + "\n", good[:-1] + "?", good + "0"):
        for build in (keys.batch, keys.outcomes, keys.ingest_job, keys.process_job_prefix):
            with pytest.raises(InvalidBatchId):
                build(bad)


@pytest.mark.kube
@pytest.mark.timeout(300)  # a busy machine runs operators and kubectl slowly
async def test_operator_logs_json_redacted_and_posts_generic_events(
    kube: Cluster,
    namespace: str,
    new_namespace: NewNamespace,
    start_operator: StartOperator,
    storage: Storage,
) -> None:
    dead = await new_namespace("dead")
    operator = await start_operator(namespace)
    await start_operator(
        dead,
        PDFQUEUE_REDIS_URL="redis://127.0.0.1:9/0",
        PDFQUEUE_OPERATOR_NAMESPACE_TENANTS=f"{dead}:hr",
    )
    email_source = storage.url("incoming/hr/jane.doe@example.com.zip")  # not there (yet)
    await kube.apply(pdfbatch("waiting", email_source), namespace=namespace)
    await kube.apply(pdfbatch("no-redis", storage.url("incoming/hr/a.zip")), namespace=dead)

    async def events(ns: str, name: str) -> list[dict[str, Any]] | None:
        run = await kube.kubectl(
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            f"involvedObject.name={name}",
            "-o",
            "json",
        )
        found = [e for e in json.loads(run.out)["items"] if e["type"] != "Normal"]
        return found or None

    for ns, name in ((namespace, "waiting"), (dead, "no-redis")):
        posted = await wait_until_async(partial(events, ns, name), f"an event on {name}")
        for event in posted:
            message = event["message"]
            assert "failed temporarily" in message, message
            for leak in ("jane.doe", "s3://", "127.0.0.1", "redis", "Error", "onnect"):
                assert leak not in message, message

    obj = await kube.get("pdfbatch", "waiting", namespace)
    assert obj is not None
    assert accepted(obj)["reason"] == "SourceNotFound"  # the object's own status says which

    lines = [line for line in operator.log.read_text().splitlines() if line.strip()]
    assert lines
    for line in lines:
        entry = json.loads(line)  # JSON from the first line on, kopf's own lines included
        assert {"ts", "level", "logger", "msg"} <= entry.keys()
    assert "jane.doe@example.com" not in operator.log.read_text()


async def test_live_state_is_never_created_with_another_tenant_than_postgresql_holds(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, redis: Redis, settings: Settings
) -> None:
    _, path = await make_corpus(2, seed=27)
    victim = await upload(api, path)
    await redis.delete(keys.batch(victim))  # its live state expired
    pool = await connect(settings.database_url, max_size=1)
    try:
        lifecycle = lifecycle_over(pool, redis, settings)
        for tenant, uid in (("globex", None), ("acme", "not-the-api")):
            with pytest.raises(BatchConflict):
                await lifecycle.register(
                    batch_id=victim,
                    tenant=tenant,
                    source_key=f"uploads/{victim}.zip",
                    pdfbatch_uid=uid,
                )
    finally:
        await pool.close()
    assert not await redis.exists(keys.batch(victim))
    assert (await api.get(f"/v1/batches/{victim}", headers=GLOBEX)).status_code == 404
    assert (await row_of(settings, victim) or {})["pdfbatch_uid"] is None
