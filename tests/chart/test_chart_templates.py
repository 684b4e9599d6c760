"""What the Helm chart's templates render, variant by variant: labels, probes, security
contexts, settings handed to each process, the rendered k8s base. helm only, no API server."""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import yaml

from pdfqueue.domain.settings import ARQ_TIMEOUT_MARGIN_S, Quota, Settings
from tests.support.chartfix import (
    CHART,
    LABELS,
    ROOT,
    SELECTOR,
    VARIANTS,
    WORKLOADS,
    Rendered,
    helm,
    render,
    template,
    values_file,
)
from tests.support.tools import installed

pytestmark = pytest.mark.skipif(not (CHART / "Chart.yaml").exists(), reason="no chart")


def test_objects_carry_the_standard_labels_and_narrow_selectors() -> None:
    rendered = render("default")
    for source, obj in rendered.objects:
        labels = obj["metadata"].get("labels", {})
        assert set(labels) >= LABELS, (source, sorted(LABELS - set(labels)))
        assert labels["app.kubernetes.io/part-of"] == "pdfqueue"
        if obj["kind"] in WORKLOADS:
            assert set(obj["spec"]["selector"]["matchLabels"]) == SELECTOR, source
            assert set(obj["spec"]["template"]["metadata"]["labels"]) >= LABELS, source
        if obj["kind"] == "Service":
            assert set(obj["spec"]["selector"]) == SELECTOR, source


def test_one_resource_per_file_named_after_its_kind_in_a_component_folder() -> None:
    seen: dict[str, list[str]] = {}
    for variant in VARIANTS:
        for source, obj in render(variant).objects:
            seen.setdefault(source, []).append(obj["kind"])
    for source, kinds in seen.items():
        path = Path(source)
        assert path.parts[:2] == ("pdfqueue", "templates"), source
        assert len(path.parts) == 4, f"{source}: templates live in a folder per component"
        assert len(set(kinds)) == 1, source
        assert kinds[0].lower() in path.name.replace("-", ""), source
        # One object per file, except the dashboards: one ConfigMap per dashboards/*.json.
        per_render = len(kinds) / len(VARIANTS)
        assert per_render <= 1 or "dashboards" in path.name, source


def test_images_default_to_the_app_version_and_never_latest() -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert app_version == "0.1.0"
    for obj in render("default").all():
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec") or (spec if obj["kind"] == "Pod" else None)
        if not pod:
            continue
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            assert ":" in c["image"], c["image"]
            assert not c["image"].endswith(":latest"), c["image"]
            if c["image"].startswith("pdfqueue-"):
                assert c["image"].endswith(f":{app_version}"), c["image"]


def test_worker_replicas_belong_to_the_operator_when_autoscaling() -> None:
    worker = render("default").one("Deployment", "-worker")
    assert "replicas" not in worker["spec"]
    assert worker["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    assert worker["metadata"]["annotations"] == {
        "pdfqueue.io/queue": "pdfqueue:queue",
        "pdfqueue.io/min-replicas": "0",
        "pdfqueue.io/max-replicas": "10",
        "pdfqueue.io/target-per-replica": "8",
        "pdfqueue.io/scale-down-stabilization-seconds": "60",
        "pdfqueue.io/idle-cooldown-seconds": "120",
    }
    fixed = render("autoscaling-off")
    worker = fixed.one("Deployment", "-worker")
    assert worker["spec"]["replicas"] == 3
    assert not any(k.startswith("pdfqueue.io/") for k in worker["metadata"].get("annotations", {}))
    assert not fixed.all("ClusterRole")
    assert not fixed.all("Role")


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_namespaced_object_names_the_release_namespace(variant: str) -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    rendered = render(variant, namespace="team-ns")
    for source, obj in rendered.objects:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == "team-ns", source


PDFQUEUE_CONTAINERS = (("api", "api", False), ("worker", "worker", False))
PDFQUEUE_CONTAINERS += (("operator", "operator", False),)


@pytest.mark.parametrize("variant", VARIANTS)
def test_settings_reach_pods_through_config_maps_and_secret_references_only(variant: str) -> None:
    """envFrom names ConfigMaps only; every env entry is a secretKeyRef; the component's own
    ConfigMap comes first and the shared one last (it holds config.extraEnv, which wins)."""
    rendered = render(variant)
    for component, name, init in PDFQUEUE_CONTAINERS:
        if f"pq-pdfqueue-{component}" not in {d["metadata"]["name"] for d in rendered.all()}:
            continue  # operator.enabled=false
        spec = rendered.one("Deployment", f"-{component}")["spec"]["template"]["spec"]
        (c,) = [x for x in spec["initContainers" if init else "containers"] if x["name"] == name]
        maps = [src["configMapRef"]["name"] for src in c["envFrom"]]
        assert [set(src) for src in c["envFrom"]] == [{"configMapRef"}] * len(maps), name
        own = [] if init else [f"pq-pdfqueue-{component}"]  # migrate has no tokens file
        assert maps == [*own, "pq-pdfqueue-config"], (component, name)
        for item in c["env"]:
            assert set(item) == {"name", "valueFrom"}, (component, name, item)
            assert set(item["valueFrom"]) == {"secretKeyRef"}, (component, name, item)


def test_extra_env_wins_over_every_chart_setting() -> None:
    rendered = render(
        "default",
        *("--set", "config.extraEnv.PDFQUEUE_WORKER_MAX_JOBS=9"),
        *("--set", "config.extraEnv.PDFQUEUE_MAX_TRIES=3"),
        *("--set", "config.extraEnv.MY_FLAG=on"),
    )
    worker = _env_of(rendered, "worker")
    assert (worker["PDFQUEUE_WORKER_MAX_JOBS"], worker["PDFQUEUE_MAX_TRIES"]) == ("9", "3")
    for component in ("api", "worker", "operator"):
        assert _env_of(rendered, component)["MY_FLAG"] == "on"
    assert _env_of(render("default"), "worker")["PDFQUEUE_WORKER_MAX_JOBS"] == "4"


PROBES = (
    ("api", "livenessProbe", {"path": "/healthz", "port": "http"}, (0, 10, 3, 3)),
    ("api", "readinessProbe", {"path": "/readyz", "port": "http"}, (0, 5, 5, 2)),
    ("worker", "livenessProbe", {"path": "/metrics", "port": "metrics"}, (0, 20, 5, 3)),
    ("operator", "livenessProbe", {"path": "/healthz", "port": "health"}, (10, 15, 5, 4)),
)
TIMINGS = ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold")


def _container(rendered: Rendered, component: str) -> dict[str, Any]:
    spec = rendered.one("Deployment", f"-{component}")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == component)


def test_probes_are_values_around_the_charts_handlers() -> None:
    default = render("default")
    for component, probe, handler, timings in PROBES:
        rendered = _container(default, component)[probe]
        assert rendered["httpGet"] == handler, (component, probe)
        assert tuple(rendered[k] for k in TIMINGS) == timings, (component, probe)
    tuned = render(
        "default",
        *("--set", "api.readinessProbe.failureThreshold=6"),
        *("--set", "api.readinessProbe.successThreshold=2"),
        *("--set", "worker.livenessProbe.timeoutSeconds=9"),
        *("--set", "operator.livenessProbe.initialDelaySeconds=30"),
        *("--set", "api.livenessProbe.enabled=false"),
    )
    api = _container(tuned, "api")
    assert "livenessProbe" not in api
    assert api["readinessProbe"] == {
        "httpGet": {"path": "/readyz", "port": "http"},
        "initialDelaySeconds": 0,
        "periodSeconds": 5,
        "timeoutSeconds": 5,
        "failureThreshold": 6,
        "successThreshold": 2,
    }
    assert _container(tuned, "worker")["livenessProbe"]["timeoutSeconds"] == 9
    assert _container(tuned, "operator")["livenessProbe"]["initialDelaySeconds"] == 30
    no_metrics = render("default", "--set", "worker.metricsPort=0")
    assert "livenessProbe" not in _container(no_metrics, "worker")  # nothing to probe


BUNDLED_PROBES = {  # (liveness, readiness): initialDelaySeconds, periodSeconds, timeout, failures
    "redis": ((10, 10, 5, 6), (0, 5, 3, 3)),
    "postgresql": ((20, 10, 5, 6), (0, 5, 3, 3)),
    "s3": ((0, 10, 1, 6), (0, 5, 1, 3)),
}


def _bundled(rendered: Rendered, service: str) -> tuple[dict[str, Any], dict[str, Any]]:
    sts = rendered.one("StatefulSet", f"-{service}")
    return sts, sts["spec"]["template"]["spec"]["containers"][0]


def test_bundled_services_probes_and_update_strategies_are_values() -> None:
    default = render("default")
    for service, timings in BUNDLED_PROBES.items():
        sts, c = _bundled(default, service)
        assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate"}, service
        for probe, expected in zip(("livenessProbe", "readinessProbe"), timings, strict=True):
            assert tuple(c[probe][k] for k in TIMINGS) == expected, (service, probe)
    assert _bundled(default, "redis")[1]["livenessProbe"]["exec"] == {
        "command": ["redis-cli", "ping"]
    }
    assert _bundled(default, "s3")[1]["readinessProbe"]["tcpSocket"] == {"port": "s3"}
    tuned = render(
        "default",
        *("--set", "postgresql.updateStrategy.type=OnDelete"),
        *("--set", "postgresql.livenessProbe.initialDelaySeconds=60"),
        *("--set", "redis.readinessProbe.enabled=false"),
    )
    sts, c = _bundled(tuned, "postgresql")
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert c["livenessProbe"]["initialDelaySeconds"] == 60
    assert c["livenessProbe"]["exec"] == c["readinessProbe"]["exec"]  # pg_isready, both
    assert "readinessProbe" not in _bundled(tuned, "redis")[1]


def test_the_s3_objects_live_on_a_pvc_or_in_an_emptydir() -> None:
    sts, c = _bundled(render("default"), "s3")
    assert [v["metadata"]["name"] for v in sts["spec"]["volumeClaimTemplates"]] == ["data"]
    assert "data" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert c["args"][-2:] == ["posix", "/data"]
    in_memory = render(
        "default",
        *("--set", "s3.persistence.enabled=false"),
        *("--set", "s3.persistence.emptyDir.medium=Memory"),
        *("--set", "s3.persistence.emptyDir.sizeLimit=1536Mi"),
        *("--set", "s3.extraArgs={--quiet}"),
    )
    sts, c = _bundled(in_memory, "s3")
    assert "volumeClaimTemplates" not in sts["spec"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1536Mi"}
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["data"] == "/data"
    assert c["args"][-3:] == ["--quiet", "posix", "/data"]  # options before the backend
    on_disk = render("default", "--set", "s3.persistence.enabled=false")
    volumes = {
        v["name"]: v for v in _bundled(on_disk, "s3")[0]["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["data"]["emptyDir"] == {}


def test_update_strategies_are_values() -> None:
    default = render("default")
    strategy = {c: default.one("Deployment", f"-{c}")["spec"]["strategy"] for c in STRATEGIES}
    assert strategy == STRATEGIES
    tuned = render(
        "default",
        *("--set", "api.updateStrategy.rollingUpdate.maxUnavailable=0"),
        *("--set", "worker.updateStrategy.rollingUpdate.maxSurge=2"),
        *("--set", "operator.updateStrategy.type=Recreate"),
        *("--set", "operator.updateStrategy.rollingUpdate=null"),
    )
    assert tuned.one("Deployment", "-api")["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0},
    }
    worker = tuned.one("Deployment", "-worker")["spec"]["strategy"]
    assert worker["rollingUpdate"] == {"maxSurge": 2, "maxUnavailable": 0}
    assert tuned.one("Deployment", "-operator")["spec"]["strategy"] == {"type": "Recreate"}


STRATEGIES = {
    "api": {"type": "RollingUpdate"},
    # new workers start before old ones drain: no dip in throughput during a rollout
    "worker": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
    # only the Lease's holder acts: a new replica stands by until the old leader releases
    "operator": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
}


DISPATCH = {
    "worker.dispatch.fair=false": ("dispatch_fair", False),
    "worker.dispatch.windowJobs=40": ("dispatch_window_jobs", 40),
    "worker.dispatch.tenantWindowJobs=12": ("dispatch_tenant_window_jobs", 12),
    "worker.dispatch.batchWindowJobs=6": ("dispatch_batch_window_jobs", 6),
    "worker.dispatch.tenantWeights.acme=3": ("dispatch_tenant_weights", {"acme": 3}),
    "worker.dispatch.tenantInflightCaps.ops\\.team=8": (
        "dispatch_tenant_inflight_caps",
        {"ops.team": 8},
    ),
    "worker.dispatch.tickSeconds=3": ("dispatch_tick_s", 3.0),
}


def test_fair_dispatch_values_reach_the_workers(tmp_path: Path) -> None:
    default = _settings_of(render("default"), "worker", tmp_path)
    for field, _ in DISPATCH.values():
        expected = Settings.model_fields[field].get_default(call_default_factory=True)
        assert getattr(default, field) == expected, field
    args = [a for value in DISPATCH for a in ("--set", value)]
    worker = _settings_of(render("default", *args), "worker", tmp_path)
    for field, expected in DISPATCH.values():
        assert getattr(worker, field) == expected, field


def test_the_pdf_engine_value_reaches_the_workers(tmp_path: Path) -> None:
    assert _settings_of(render("default"), "worker", tmp_path).pdf_engine == "pdfium"
    chosen = render("default", "--set", "worker.pdfEngine=pypdf")
    assert _settings_of(chosen, "worker", tmp_path).pdf_engine == "pypdf"


def test_grace_period_exceeds_completion_wait_which_exceeds_job_timeout() -> None:
    for variant, grace in [("default", 40), ("autoscaling-off", 60)]:
        rendered = render(variant)
        pod = rendered.one("Deployment", "-worker")["spec"]["template"]["spec"]
        env = rendered.container_env(rendered.one("Deployment", "-worker"), "worker")
        assert pod["terminationGracePeriodSeconds"] == grace
        assert (
            grace
            > int(env["PDFQUEUE_JOB_COMPLETION_WAIT_S"])
            > float(env["PDFQUEUE_JOB_TIMEOUT_S"]) + ARQ_TIMEOUT_MARGIN_S  # arq's hard limit
        )


def _settings_from_env(env: dict[str, str]) -> Settings:
    """Settings as a process with exactly these PDFQUEUE_* variables reads them (JSON values
    are decoded from the environment only, not from keyword arguments)."""
    others = {k: v for k, v in os.environ.items() if not k.startswith("PDFQUEUE_")}
    with patch.dict(os.environ, others | env, clear=True):
        return Settings()


TOKENS_FILE = "/run/secrets/pdfqueue/api-tokens"
TLS_DIR = "/etc/pdfqueue/tls/"


def _pdfqueue_env(
    rendered: Rendered, workload: dict[str, Any], container: str, files: Path
) -> dict[str, str]:
    """A container's PDFQUEUE_* variables, its mounted tokens file copied under `files`. Values
    held in Secrets the chart only refers to (existingSecret) are unknown here: left out."""
    env = rendered.container_env(workload, container, namespace="pdfqueue", existing_ok=True)
    ours = {k: v for k, v in env.items() if k.startswith("PDFQUEUE_")}
    if "PDFQUEUE_API_TOKENS_FILE" in ours:
        tokens = rendered.mounted_secret(workload, container, TOKENS_FILE, existing_ok=True)
        copy = files / f"{workload['metadata']['name']}-{container}-tokens"
        copy.write_text(tokens)
        ours["PDFQUEUE_API_TOKENS_FILE"] = str(copy)
        if tokens.startswith("<existing "):
            del ours["PDFQUEUE_API_TOKENS_FILE"]
    # a CA bundle or client certificate: mounted where the variable says, a stand-in here
    spec = workload["spec"]["template"]["spec"]
    (mine,) = (c for c in spec["containers"] if c["name"] == container)
    mounted = {m["mountPath"] for m in mine.get("volumeMounts", [])}
    for name, path in list(ours.items()):
        if name.endswith("_FILE") and path.startswith(TLS_DIR):
            assert str(Path(path).parent) in mounted, (workload["metadata"]["name"], name)
            stand_in = files / f"{workload['metadata']['name']}-{container}-{name}"
            stand_in.write_text("mounted from a Secret")
            ours[name] = str(stand_in)
    return {k: v for k, v in ours.items() if not v.startswith("<existing ")}


def test_every_pdfqueue_pod_mounts_the_stores_ca_bundles_where_its_settings_say() -> None:
    """tls.*: each named Secret is a volume of every pod that reaches the stores (API, worker,
    operator, the migrate Job and the purge CronJob), mounted at /etc/pdfqueue/tls/<store>/,
    and the shared settings name the files in it; the database's bundle is for its URL."""
    rendered = render("external")
    config = rendered.one("ConfigMap", "-config")["data"]
    assert config["PDFQUEUE_REDIS_CA_FILE"] == TLS_DIR + "redis/ca.crt"
    assert config["PDFQUEUE_REDIS_CERT_FILE"] == TLS_DIR + "redis-client/tls.crt"
    assert config["PDFQUEUE_REDIS_KEY_FILE"] == TLS_DIR + "redis-client/tls.key"
    assert config["PDFQUEUE_S3_CA_FILE"] == TLS_DIR + "s3/ca.crt"
    secrets = {"tls-redis": "redis-ca", "tls-redis-client": "redis-client-cert"}
    secrets |= {"tls-postgresql": "rds-ca", "tls-s3": "private-ca"}
    pods = [w["spec"]["template"]["spec"] for w in rendered.all("Deployment") + rendered.all("Job")]
    pods += [c["spec"]["jobTemplate"]["spec"]["template"]["spec"] for c in rendered.all("CronJob")]
    pdfqueue = [p for p in pods if any(c.get("envFrom") for c in p["containers"])]
    assert len(pdfqueue) >= 5
    for pod in pdfqueue:
        volumes = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        assert {k: volumes.get(k) for k in secrets} == secrets
        (db,) = (v for v in pod["volumes"] if v["name"] == "tls-postgresql")
        assert db["secret"]["items"] == [{"key": "global-bundle.pem", "path": "ca.crt"}]
        for container in pod["containers"]:
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            for store in ("redis", "redis-client", "postgresql", "s3"):
                assert mounts[f"tls-{store}"] == TLS_DIR + store
    for name in secrets:  # nothing of it without tls.*
        assert f"name: {name}\n" not in template("-f", str(values_file("default")))


def test_other_ways_in_reach_the_api_and_only_its_service_account_reviews_tokens() -> None:
    """auth.oidc and auth.kubernetesTokens: their settings in the API's ConfigMap, the API's
    ServiceAccount (alone) bound to system:auth-delegator for TokenReviews, its token mounted;
    either one is a way in without static tokens, and an issuer alone is refused (as is the
    page's client without an issuer)."""
    rendered = render("external")
    config = rendered.one("ConfigMap", "-api")["data"]
    assert config["PDFQUEUE_OIDC_ISSUER"] == "https://login.example.internal/realms/hr"
    assert config["PDFQUEUE_OIDC_AUDIENCE"] == "pdfqueue-api"
    assert config["PDFQUEUE_OIDC_JWKS_URL"].endswith("/protocol/openid-connect/certs")
    assert config["PDFQUEUE_OIDC_PAGE_CLIENT_ID"] == "pdfqueue-page"  # the page's sign-in
    assert config["PDFQUEUE_OIDC_PAGE_SCOPES"] == "openid"
    assert config["PDFQUEUE_KUBERNETES_TOKENS"] == "true"
    assert config["PDFQUEUE_KUBERNETES_TOKEN_AUDIENCE"] == "pdfqueue"
    api = rendered.one("Deployment", "-api")["spec"]["template"]["spec"]
    assert api["automountServiceAccountToken"] is True
    delegated = [
        b
        for b in rendered.all("ClusterRoleBinding")
        if b["roleRef"]["name"] == "system:auth-delegator"
    ]
    assert [b["subjects"] for b in delegated] == [
        [{"kind": "ServiceAccount", "name": api["serviceAccountName"], "namespace": "pdfqueue"}]
    ]
    plain = render("default")
    assert not [
        b
        for b in plain.all("ClusterRoleBinding")
        if b["roleRef"]["name"] == "system:auth-delegator"
    ]
    assert "PDFQUEUE_OIDC_ISSUER" not in plain.one("ConfigMap", "-api")["data"]
    for way in (
        ["--set", "auth.kubernetesTokens.enabled=true"],
        ["--set", "auth.oidc.issuer=https://i,auth.oidc.audience=a,auth.oidc.jwksUrl=https://i/k"],
    ):
        assert "kind: Deployment" in template(*way)  # no static token needed
    refused = helm("template", "pq", str(CHART), "--set", "auth.oidc.issuer=https://i", check=False)
    assert refused.returncode != 0
    assert "set all three" in refused.stderr
    alone = ("template", "pq", str(CHART), "--set", "auth.oidc.pageClientId=p")
    refused = helm(*alone, "--set", "auth.kubernetesTokens.enabled=true", check=False)
    assert "pageClientId is set without auth.oidc.issuer" in refused.stderr


def test_env_is_made_of_real_settings_and_parses(tmp_path: Path) -> None:
    """Every PDFQUEUE_* variable the chart sets is a Settings field, and Settings accepts them."""
    known = {f"PDFQUEUE_{name.upper()}" for name in Settings.model_fields}
    for variant in VARIANTS:
        rendered = render(variant)
        for obj in rendered.all("Deployment"):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                ours = _pdfqueue_env(rendered, obj, c["name"], tmp_path)
                assert set(ours) <= known, (variant, c["name"], sorted(set(ours) - known))
                settings = _settings_from_env(ours)
                settings.check_shutdown_rule()
                assert settings.storage_url.startswith("s3://")


QUOTAS_JSON = (
    '{"acme":{"bytes_per_day":0,"concurrent_batches":3},'
    '"ops.team":{"retries_per_hour":2,"uploads_per_minute":0}}'
)
TENANCY = {  # value set -> (containers that read it, variable, what they get)
    "config.maxDirectoryBytes=1048576": (
        ("api", "worker"),
        "PDFQUEUE_MAX_DIRECTORY_BYTES",
        "1048576",
    ),
    "api.trustedTenants={acme,ops.team}": (("api",), "PDFQUEUE_TRUSTED_TENANTS", "acme,ops.team"),
    "api.quotas.uploadsPerMinute=7": (("api",), "PDFQUEUE_QUOTA_UPLOADS_PER_MINUTE", "7"),
    "api.quotas.bytesPerDay=107374182400": (
        ("api",),
        "PDFQUEUE_QUOTA_BYTES_PER_DAY",
        "107374182400",
    ),
    "api.quotas.concurrentBatches=0": (("api",), "PDFQUEUE_QUOTA_CONCURRENT_BATCHES", "0"),
    "api.quotas.retriesPerHour=5": (("api",), "PDFQUEUE_QUOTA_RETRIES_PER_HOUR", "5"),
    "api.tenantQuotas.acme.bytesPerDay=0": (
        ("api",),
        "PDFQUEUE_TENANT_QUOTAS",
        QUOTAS_JSON,
    ),
    "api.tenantQuotas.acme.concurrentBatches=3": (
        ("api",),
        "PDFQUEUE_TENANT_QUOTAS",
        QUOTAS_JSON,
    ),
    r"api.tenantQuotas.ops\.team.uploadsPerMinute=0": (
        ("api",),
        "PDFQUEUE_TENANT_QUOTAS",
        QUOTAS_JSON,
    ),
    r"api.tenantQuotas.ops\.team.retriesPerHour=2": (
        ("api",),
        "PDFQUEUE_TENANT_QUOTAS",
        QUOTAS_JSON,
    ),
    "worker.usersTenantColumn=tenant_id": (
        ("worker",),
        "PDFQUEUE_USERS_TENANT_COLUMN",
        "tenant_id",
    ),
    "worker.extractMaxPageChars=20000": (("worker",), "PDFQUEUE_EXTRACT_MAX_PAGE_CHARS", "20000"),
    "operator.namespaceTenants.team-b=beta": (
        ("operator",),
        "PDFQUEUE_OPERATOR_NAMESPACE_TENANTS",
        "intake:*,team-b:beta",
    ),
    "operator.namespaceTenants.intake=*": (
        ("operator",),
        "PDFQUEUE_OPERATOR_NAMESPACE_TENANTS",
        "intake:*,team-b:beta",
    ),
    "operator.sourcePrefix=manifests/in": (
        ("operator",),
        "PDFQUEUE_OPERATOR_SOURCE_PREFIX",
        "manifests/in",
    ),
}
TENANCY_FIELDS = {
    "PDFQUEUE_MAX_DIRECTORY_BYTES": "max_directory_bytes",
    "PDFQUEUE_TRUSTED_TENANTS": "trusted_tenants",
    "PDFQUEUE_QUOTA_UPLOADS_PER_MINUTE": "quota_uploads_per_minute",
    "PDFQUEUE_QUOTA_BYTES_PER_DAY": "quota_bytes_per_day",
    "PDFQUEUE_QUOTA_CONCURRENT_BATCHES": "quota_concurrent_batches",
    "PDFQUEUE_QUOTA_RETRIES_PER_HOUR": "quota_retries_per_hour",
    "PDFQUEUE_TENANT_QUOTAS": "tenant_quotas",
    "PDFQUEUE_USERS_TENANT_COLUMN": "users_tenant_column",
    "PDFQUEUE_EXTRACT_MAX_PAGE_CHARS": "extract_max_page_chars",
    "PDFQUEUE_OPERATOR_NAMESPACE_TENANTS": "operator_namespace_tenants",
    "PDFQUEUE_OPERATOR_SOURCE_PREFIX": "operator_source_prefix",
}


def _env_of(rendered: Rendered, component: str) -> dict[str, str]:
    return rendered.container_env(rendered.one("Deployment", f"-{component}"), component)


def _settings_of(rendered: Rendered, component: str, files: Path) -> Settings:
    workload = rendered.one("Deployment", f"-{component}")
    return _settings_from_env(_pdfqueue_env(rendered, workload, component, files))


def test_tenancy_and_quota_values_reach_the_containers_that_read_them(tmp_path: Path) -> None:
    args = [a for value in TENANCY for a in ("--set", value)]
    rendered = render("default", *args)
    for value, (components, name, expected) in TENANCY.items():
        for component in components:
            assert _env_of(rendered, component)[name] == expected, (value, component)
    worker = _settings_of(rendered, "worker", tmp_path)
    assert worker.users_tenant_column == "tenant_id"
    assert worker.extract_max_page_chars == 20000
    assert worker.max_directory_bytes == 1048576
    api = _settings_of(rendered, "api", tmp_path)
    assert api.max_directory_bytes == 1048576
    assert api.trusted_tenants == {"acme", "ops.team"}
    assert api.quota_for("acme") == Quota(
        uploads_per_minute=7, bytes_per_day=0, concurrent_batches=3, retries_per_hour=5
    )
    assert api.quota_for("ops.team") == Quota(
        uploads_per_minute=0, bytes_per_day=107374182400, concurrent_batches=0, retries_per_hour=2
    )
    assert api.quota_for("other") == Quota(
        uploads_per_minute=7, bytes_per_day=107374182400, concurrent_batches=0, retries_per_hour=5
    )
    operator = _settings_of(rendered, "operator", tmp_path)
    trusting = render(  # the API's namespace may be listed, as "*"
        "external", "--set", "operator.namespaceTenants.pdfqueue=*", namespace="pdfqueue"
    )
    assert (
        trusting.one("ConfigMap", "-config")["data"]["PDFQUEUE_OPERATOR_NAMESPACE_TENANTS"]
        == "pdfqueue:*"
    )
    assert operator.operator_namespace_tenants == {"intake": "*", "team-b": "beta"}
    assert operator.operator_source_prefix == "manifests/in/"
    # the values change the ConfigMap only: the tokens stay in their Secret, unchanged
    assert not any("TOKEN" in k for k in rendered.one("ConfigMap", "-config")["data"])
    plain = render("default")
    assert api.api_tokens  # read from the mounted file
    assert api.api_tokens == _settings_of(plain, "api", tmp_path).api_tokens
    assert plain.all("Secret") == rendered.all("Secret")


def test_tenancy_and_quota_defaults_are_the_settings_defaults(tmp_path: Path) -> None:
    rendered = render("default")
    for component in ("api", "worker", "operator"):
        assert "PDFQUEUE_USERS_TENANT_COLUMN" not in _env_of(rendered, component)
        parsed = _settings_of(rendered, component, tmp_path)
        for name, field in TENANCY_FIELDS.items():
            default = Settings.model_fields[field].get_default(call_default_factory=True)
            assert getattr(parsed, field) == default, (component, name)


def test_bundled_service_urls_are_composed_from_secrets(tmp_path: Path) -> None:
    """The URLs sit in the ConfigMap without passwords; Settings adds those from the Secrets."""
    rendered = render("default")
    env = rendered.container_env(rendered.one("Deployment", "-api"), "api")
    assert env["PDFQUEUE_REDIS_URL"] == "redis://pq-pdfqueue-redis:6379/0"
    assert env["PDFQUEUE_REDIS_PASSWORD"] == "ci-redis-password"
    for component in ("api", "worker", "operator"):
        settings = _settings_of(rendered, component, tmp_path)
        assert settings.redis_url == "redis://:ci-redis-password@pq-pdfqueue-redis:6379/0"
        assert settings.database_url == (
            "postgresql://pdfqueue:ci-postgres-password@pq-pdfqueue-postgresql:5432/pdfqueue"
        )
    for render_of, job_name in ((rendered, "-migrate-install"), (_upgrade(), "-migrate")):
        migrate = render_of.container_env(render_of.one("Job", job_name), "migrate")
        assert _settings_from_env(migrate).database_url == settings.database_url
    assert env["PDFQUEUE_S3_ENDPOINT_URL"] == "http://pq-pdfqueue-s3:7070"
    assert env["AWS_ACCESS_KEY_ID"] == "ci-access-key"
    tokens = rendered.mounted_secret(rendered.one("Deployment", "-api"), "api", TOKENS_FILE)
    assert tokens == "acme:ci-token-acme-0123456789abcdef0123456789"
    for cm in rendered.all("ConfigMap"):  # no credential in any ConfigMap
        assert "ci-redis-password" not in str(cm)
        assert "ci-secret-key" not in str(cm)
    external = render("external")
    env = external.container_env(external.one("Deployment", "-worker"), "worker", existing_ok=True)
    assert (
        env["PDFQUEUE_DATABASE_URL"] == "postgresql://app:app-password@db.example.internal:5432/app"
        "?sslmode=verify-full&sslrootcert=/etc/pdfqueue/tls/postgresql/ca.crt"
    )
    assert env["PDFQUEUE_STORAGE_URL"] == "s3://pdfqueue-ci/tenant-a/uploads"
    assert env["PDFQUEUE_USERS_TABLE"] == "public.users"
    assert not external.all("StatefulSet")
    assert sorted(p["metadata"]["name"] for p in external.all("NetworkPolicy")) == [
        "pq-pdfqueue-api",
        "pq-pdfqueue-migrate",
        "pq-pdfqueue-operator",
        "pq-pdfqueue-retention",
        "pq-pdfqueue-test-readyz",  # the `helm test` hook's
        "pq-pdfqueue-worker",
    ]


def test_api_tokens_reach_the_api_as_a_read_only_file_never_as_a_variable() -> None:
    """A variable is inherited by every process the API starts and shows in environment dumps;
    the mounted file is read once, at start, by the API container alone."""
    for variant in VARIANTS:
        rendered = render(variant)
        for obj in rendered.all("Deployment"):
            spec = obj["spec"]["template"]["spec"]
            pool = [(c, False) for c in spec["containers"]]
            for c, init in pool + [(c, True) for c in spec.get("initContainers", [])]:
                env = rendered.container_env(obj, c["name"], init=init, existing_ok=True)
                names = set(env)
                assert "PDFQUEUE_API_TOKENS" not in names, (variant, c["name"])
                wants_file = obj["metadata"]["name"].endswith("-api") and c["name"] == "api"
                assert ("PDFQUEUE_API_TOKENS_FILE" in names) == wants_file, (variant, c["name"])
                mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
                assert ("api-tokens" in mounts) == wants_file, (variant, c["name"])
        api = rendered.one("Deployment", "-api")
        (c,) = api["spec"]["template"]["spec"]["containers"]
        env = rendered.container_env(api, "api", existing_ok=True)
        assert env["PDFQUEUE_API_TOKENS_FILE"] == TOKENS_FILE
        assert rendered.one("ConfigMap", "-api")["data"]["PDFQUEUE_API_TOKENS_FILE"] == TOKENS_FILE
        mount = next(m for m in c["volumeMounts"] if m["name"] == "api-tokens")
        assert mount["readOnly"] is True
        (volume,) = [
            v for v in api["spec"]["template"]["spec"]["volumes"] if v["name"] == "api-tokens"
        ]
        assert volume["secret"]["defaultMode"] == 0o440  # uid 10001 reads it through fsGroup
    external = render("external")
    volume = next(
        v
        for v in external.one("Deployment", "-api")["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "api-tokens"
    )
    assert volume["secret"]["secretName"] == "pdfqueue-tokens"  # auth.existingSecret
    assert volume["secret"]["items"] == [{"key": "api-tokens", "path": "api-tokens"}]


def test_redis_is_a_durable_queue() -> None:
    redis = render("default").one("StatefulSet", "-redis")
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert flags["--appendonly"] == "yes"
    assert flags["--appendfsync"] == "everysec"
    assert flags["--maxmemory-policy"] == "noeviction"
    assert flags["--include"] == "/run/redis/auth.conf"  # requirepass, from the Secret
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


def test_network_policies_admit_only_this_releases_pdfqueue_pods() -> None:
    rendered = render("default")
    clients = ["api", "worker", "operator", "retention"]
    for name, more in (("-redis", []), ("-postgresql", ["migrate"]), ("-s3", ["migrate"])):
        policy = rendered.one("NetworkPolicy", name)
        (rule,) = policy["spec"]["ingress"]
        (peer,) = rule["from"]
        exprs = {e["key"]: e["values"] for e in peer["podSelector"]["matchExpressions"]}
        assert exprs == {
            "app.kubernetes.io/instance": ["pq"],
            "app.kubernetes.io/part-of": ["pdfqueue"],
            "app.kubernetes.io/component": clients + more,
        }
        assert "namespaceSelector" not in peer  # only pods of the release's own namespace


def _purge_job(rendered: Rendered) -> dict[str, Any]:
    """The retention CronJob's Job spec, shaped like a workload (spec.template)."""
    return {"spec": rendered.one("CronJob", "-retention")["spec"]["jobTemplate"]["spec"]}


def test_retention_runs_purge_as_a_cron_job_like_a_worker() -> None:
    """The CronJob runs `pdfqueue purge` with the worker's image, settings, secrets and
    security context, once at a time, on the values' schedule."""
    rendered = render("default")
    cron = rendered.one("CronJob", "-retention")
    assert cron["metadata"]["labels"]["app.kubernetes.io/component"] == "retention"
    assert cron["spec"]["schedule"] == "17 3 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert cron["spec"]["suspend"] is False
    assert cron["spec"]["startingDeadlineSeconds"] == 3600
    assert cron["spec"]["successfulJobsHistoryLimit"] == 3
    assert cron["spec"]["failedJobsHistoryLimit"] == 3
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert set(pod["metadata"]["labels"]) >= LABELS
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    worker = rendered.one("Deployment", "-worker")["spec"]["template"]["spec"]
    assert spec["securityContext"] == worker["securityContext"]
    (purge,) = spec["containers"]
    (w,) = worker["containers"]
    assert purge["args"] == ["purge"]
    assert purge["image"] == w["image"] == "pdfqueue-worker:0.1.0"
    assert purge["envFrom"] == w["envFrom"]
    assert purge["env"] == w["env"]  # the database, Redis and S3 secrets
    assert purge["securityContext"] == w["securityContext"]
    assert purge["securityContext"]["readOnlyRootFilesystem"] is True
    assert purge["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "256Mi"},
    }
    off = render("default", "--set", "retention.enabled=false")
    assert not off.all("CronJob")
    assert not [p for p in off.all("NetworkPolicy") if p["metadata"]["name"].endswith("-retention")]


def test_retention_values_reach_the_api_the_workers_and_the_purge(tmp_path: Path) -> None:
    rendered = render(
        "default",
        *("--set", "retention.days=7", "--set", "retention.tenantDays.acme=3"),
        *("--set", "retention.tenantDays.archive=0", "--set", "retention.auditDays=500"),
    )
    purge = _pdfqueue_env(rendered, _purge_job(rendered), "purge", tmp_path)
    for env in (
        purge,
        _settings_env(rendered, "api", tmp_path),
        _settings_env(rendered, "worker", tmp_path),
    ):
        assert env["PDFQUEUE_RETENTION_DAYS"] == "7"
        assert env["PDFQUEUE_TENANT_RETENTION_DAYS"] == '{"acme":3,"archive":0}'
        assert env["PDFQUEUE_AUDIT_RETENTION_DAYS"] == "500"
        settings = _settings_from_env(env)
        assert settings.retention_days == 7
        assert settings.tenant_retention_days == {"acme": 3, "archive": 0}
        assert settings.audit_retention_days == 500
    defaults = _settings_from_env(
        _pdfqueue_env(rendered := render("default"), _purge_job(rendered), "purge", tmp_path)
    )
    assert (defaults.retention_days, defaults.tenant_retention_days) == (30, {})
    assert defaults.audit_retention_days == 400
    assert (
        Settings.model_fields["retention_days"].default == 30
    )  # the chart's default is the code's
    assert Settings.model_fields["audit_retention_days"].default == 400


def _settings_env(rendered: Rendered, component: str, files: Path) -> dict[str, str]:
    return _pdfqueue_env(rendered, rendered.one("Deployment", f"-{component}"), component, files)


def test_retention_pods_reach_the_stores_and_nothing_else() -> None:
    """The purge's policy: no ingress, and the worker's egress (DNS, Redis, PostgreSQL, S3);
    the bundled stores admit it, and it is selected by its own labels."""
    for variant in ("default", "external"):
        rendered = render(variant)
        policy = rendered.one("NetworkPolicy", "-retention")["spec"]
        assert policy["policyTypes"] == ["Ingress", "Egress"]
        assert policy["ingress"] == []
        assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "retention"
        assert policy["egress"] == rendered.one("NetworkPolicy", "-worker")["spec"]["egress"]
        pod = rendered.one("CronJob", "-retention")["spec"]["jobTemplate"]["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert all(labels[k] == v for k, v in policy["podSelector"]["matchLabels"].items())
    ports = {
        port["port"]
        for rule in render("default").one("NetworkPolicy", "-retention")["spec"]["egress"]
        for port in rule.get("ports", [])
    }
    assert ports >= {53, 6379, 5432, 7070}


def _volume_note(tmp_path: Path, *args: str) -> str:
    """What NOTES.txt says of the bundled PostgreSQL's volume: its helper, rendered into a
    probe ConfigMap of a copy of the chart (`helm template` does not render NOTES.txt)."""
    chart = tmp_path / "pdfqueue"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        (chart / "templates" / "probe.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
            'data:\n  note: {{ include "pdfqueue.retention.volumeNote" . | trim | quote }}\n'
        )
    out = helm("template", "pq", str(chart), "-f", str(values_file("default")), *args).stdout
    (probe,) = [d for _, d in Rendered.parse(out).objects if d["metadata"]["name"] == "probe"]
    return str(probe["data"]["note"])


def _measured_bytes_per_pdf() -> float:
    """pdfqueue_files' bytes per PDF in the pg_footprint result that capacity.md cites."""
    import json

    page = (ROOT / "docs/operations/capacity.md").read_text()
    (name,) = set(re.findall(r"bench/results/(pg-footprint-[\w]+\.json)", page))
    result = json.loads((ROOT / "bench/results" / name).read_text())
    return float(result["bytes_per_pdf"]["total"])


def test_notes_size_the_bundled_postgresql_volume_against_retention(tmp_path: Path) -> None:
    """The bytes per PDF the note reckons with are the measured ones; it warns when the
    volume does not hold the retention at 1 M PDFs an hour, or when nothing purges."""
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert '{{ include "pdfqueue.retention.volumeNote" . | trim }}' in notes
    measured = _measured_bytes_per_pdf()
    used = float(
        re.search(r"\$bytesPerPdf := ([0-9.]+)", (CHART / "templates/_helpers.tpl").read_text())[1]
    )
    assert abs(used - measured) <= 10, (used, measured)
    note = _volume_note(tmp_path)
    needed = math.ceil(used * 24e6 * 31 * 2 / 2**30)  # 30 days and the day before the purge
    assert "postgresql.persistence.size=8Gi" in note
    assert f"rows of about {8 * 2**30 / 2 / used / 1e6:.1f} M PDFs" in note
    assert f"about {int(8 * 2**30 / 2 / used // 31 // 24)} PDFs an hour" in note
    assert (
        f"WARNING: at 1 M PDFs an hour, 30 days of pdfqueue_files need a volume of about\n{needed}Gi"
        in note
    )
    big = _volume_note(tmp_path, "--set", f"postgresql.persistence.size={needed}Gi")
    assert "Capacity:" in big
    assert "WARNING" not in big
    for args in (["--set", "retention.days=0"], ["--set", "retention.tenantDays.acme=0"]):
        assert "keeps batches for ever: nothing purges" in _volume_note(tmp_path, *args)
    off = _volume_note(tmp_path, "--set", "retention.enabled=false")
    assert off.startswith("WARNING: retention.enabled is false: nothing purges")
    longest = _volume_note(tmp_path, "--set", "retention.tenantDays.archive=90")
    assert "purged daily after 90 days" in longest


def test_operator_replicas_elect_one_leader_through_a_lease() -> None:
    rendered = render("default")
    op = rendered.one("Deployment", "-operator")
    assert op["spec"]["replicas"] == 2
    (c,) = op["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["operator", "--namespace=pdfqueue"]  # elected: never --standalone
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    env = _env_of(rendered, "operator")
    assert {k: v for k, v in env.items() if "_LEASE_" in k} == {
        "PDFQUEUE_OPERATOR_LEASE_NAME": "pq-pdfqueue-operator",
        "PDFQUEUE_OPERATOR_LEASE_NAMESPACE": "pdfqueue",
        "PDFQUEUE_OPERATOR_LEASE_DURATION_S": "8",
        "PDFQUEUE_OPERATOR_LEASE_RENEW_DEADLINE_S": "5",
        "PDFQUEUE_OPERATOR_LEASE_RETRY_PERIOD_S": "1.5",
    }
    role = rendered.one("Role", "-operator")
    comments = (CHART / "templates/operator/_rbac.tpl").read_text()
    assert "# framework:" in comments
    assert "# application:" in comments
    verbs = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert verbs[("pdfqueue.io", "pdfbatches")] == {"get", "list", "watch", "patch"}
    assert verbs[("apps", "deployments/scale")] == {"get", "patch"}
    assert "delete" not in set().union(*verbs.values())
    assert not any(r == "secrets" for _, r in verbs)
    for variant in ("default", "ingress"):  # namespaced and cluster-wide alike
        election = render(variant).one("Role", "-operator-leader-election")
        assert election["metadata"]["namespace"] == "pdfqueue"
        assert election["rules"] == [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["pq-pdfqueue-operator"],
                "verbs": ["get", "update", "patch"],
            },
        ]
        binding = render(variant).one("RoleBinding", "-operator-leader-election")
        assert binding["roleRef"]["name"] == "pq-pdfqueue-operator-leader-election"
    wide = render("ingress").one("ClusterRole", "-operator-pdfqueue")
    assert any("pdfbatches" in rule["resources"] for rule in wide["rules"])
    assert render("ingress").one("Deployment", "-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"] == ["operator"]


def test_operator_and_api_spread_over_nodes_and_keep_one_pod_through_a_drain() -> None:
    rendered = render("default")
    for component in ("operator", "api"):
        pod = rendered.one("Deployment", f"-{component}")["spec"]["template"]["spec"]
        assert pod["topologySpreadConstraints"] == [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/name": "pdfqueue",
                        "app.kubernetes.io/instance": "pq",
                        "app.kubernetes.io/component": component,
                    }
                },
            }
        ], component
    pdb = rendered.one("PodDisruptionBudget", "-operator")["spec"]
    assert pdb == {
        "maxUnavailable": 1,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "pdfqueue",
                "app.kubernetes.io/instance": "pq",
                "app.kubernetes.io/component": "operator",
            }
        },
    }
    assert rendered.one("PodDisruptionBudget", "-api")["spec"]["minAvailable"] == 1
    off = render(
        "default",
        *("--set", "operator.topologySpread.enabled=false,api.topologySpread.enabled=false"),
        *("--set", "operator.pdb.enabled=false"),
    )
    for component in ("operator", "api"):
        pod = off.one("Deployment", f"-{component}")["spec"]["template"]["spec"]
        assert "topologySpreadConstraints" not in pod
    assert not [o for o in off.all("PodDisruptionBudget") if "-operator" in o["metadata"]["name"]]


def _rules(objects: list[dict[str, Any]]) -> set[tuple[str, str, frozenset[str]]]:
    return {
        (group, resource, frozenset(rule["verbs"]))
        for obj in objects
        for rule in obj["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


@pytest.mark.parametrize("variant", ["default", "ingress"])
def test_operator_rbac_mirrors_the_operators_own_manifests(variant: str) -> None:
    """The chart grants the operator exactly what k8s/rbac/operator.yaml grants it."""
    own = [
        d
        for d in yaml.safe_load_all((ROOT / "k8s/rbac/operator.yaml").read_text())
        if d and d["kind"] in ("ClusterRole", "Role")
    ]
    rendered = render(variant)
    chart = [
        o
        for o in rendered.all("ClusterRole") + rendered.all("Role")
        if o["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    ]
    assert _rules(chart) == _rules(own)


def test_the_cluster_wide_overlay_grants_the_namespaced_roles_rules_everywhere() -> None:
    """k8s/cluster-wide/ widens k8s/rbac/operator.yaml's Role to a ClusterRole, rule for rule."""
    (role,) = [
        d
        for d in yaml.safe_load_all((ROOT / "k8s/rbac/operator.yaml").read_text())
        if d and d["kind"] == "Role" and d["metadata"]["name"] == "pdfqueue-operator"
    ]
    (wide,) = [
        d
        for d in yaml.safe_load_all((ROOT / "k8s/cluster-wide/operator-rbac.yaml").read_text())
        if d and d["kind"] == "ClusterRole"
    ]
    assert wide["rules"] == role["rules"]


@functools.cache
def _upgrade(variant: str = "default", *args: str) -> Rendered:
    """The render of a `helm upgrade` (hooks for upgrades only)."""
    return render(variant, "--is-upgrade", *args)


HOOK = "before-hook-creation,hook-succeeded"


def test_migrate_runs_once_per_release_and_in_no_api_pod() -> None:
    """At install an ordinary Job beside the bundled PostgreSQL it needs; at upgrade a
    pre-upgrade hook, its settings in a hook ConfigMap of their own (the release's ConfigMap
    holds the previous release's until the hook is done), and its way into the stores too."""
    for variant in VARIANTS:
        for rendered in (render(variant), _upgrade(variant)):
            for obj in rendered.all("Deployment") + rendered.all("StatefulSet"):
                pod = obj["spec"]["template"]["spec"]
                for c in pod["containers"] + pod.get("initContainers", []):
                    assert "migrate" not in c.get("args", []), (variant, obj["metadata"]["name"])
            (job,) = rendered.all("Job")
            (c,) = job["spec"]["template"]["spec"]["containers"]
            assert c["args"] == ["migrate"]
            assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False

    install = render("default").one("Job", "-migrate-install")
    assert "annotations" not in install["metadata"]
    assert install["spec"]["backoffLimit"] == 3
    assert install["spec"]["activeDeadlineSeconds"] == 3600
    upgrade = _upgrade("default", "--set", "migrations.backoffLimit=7")
    job = upgrade.one("Job", "-migrate")
    assert job["metadata"]["name"] == "pq-pdfqueue-migrate"
    assert job["metadata"]["annotations"] == {
        "helm.sh/hook": "pre-upgrade",
        "helm.sh/hook-weight": "0",
        "helm.sh/hook-delete-policy": HOOK,
    }
    assert job["spec"]["backoffLimit"] == 7
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert c["envFrom"] == [{"configMapRef": {"name": "pq-pdfqueue-migrate"}}]
    settings = upgrade.one("ConfigMap", "-migrate")
    assert settings["data"] == upgrade.one("ConfigMap", "-config")["data"]
    hooks = [settings, *upgrade.all("NetworkPolicy")]
    for obj in [o for o in hooks if "migrate" in o["metadata"]["name"]]:
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
        assert obj["metadata"]["annotations"]["helm.sh/hook-weight"] == "-10"  # before the Job
    into = upgrade.one("NetworkPolicy", "-migrate-postgresql")
    assert into["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "postgresql"
    assert not [
        m for m in render("default").all("ConfigMap") if m["metadata"]["name"].endswith("-migrate")
    ]
    for off in ("migrations.enabled=false", "api.migrate.enabled=false"):  # the old name too
        for rendered in (render("default", "--set", off), _upgrade("default", "--set", off)):
            assert not rendered.all("Job"), off
            assert not [
                n for n in rendered.all("NetworkPolicy") if "migrate" in n["metadata"]["name"]
            ]


def test_api_probes_and_migrations() -> None:
    rendered = render("default")
    api = rendered.one("Deployment", "-api")
    pod = api["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "initContainers" not in pod  # the schema is the migration Job's (test_migrate_*)
    assert rendered.one("PodDisruptionBudget", "-api")["spec"]["minAvailable"] == 1
    assert rendered.one("PodDisruptionBudget", "-worker")["spec"]["maxUnavailable"] == 1
    ingress = render("ingress").one("Ingress", "-api")
    assert ingress["spec"]["tls"] == [
        {"hosts": ["pdfqueue.example.com"], "secretName": "pdfqueue-tls"}
    ]
    test_pod = rendered.one("Pod", "-test-readyz")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["containers"][0]["args"][-1] == "http://pq-pdfqueue-api:80/readyz"


def test_monitoring_ships_alerts_and_dashboards_from_files() -> None:
    rendered = render("monitoring")
    rule = rendered.one("PrometheusRule", "pq-pdfqueue")
    groups: list[Any] = []
    for path in sorted((CHART / "alerts").glob("*.yaml")):
        groups += yaml.safe_load(path.read_text())["groups"]
    assert groups, "charts/pdfqueue/alerts/*.yaml holds no rule group"
    assert rule["spec"]["groups"] == groups
    dashboards = sorted(p.name for p in (CHART / "dashboards").glob("*.json"))
    maps = [cm for cm in rendered.all("ConfigMap") if "-dashboard-" in cm["metadata"]["name"]]
    assert sorted(k for cm in maps for k in cm["data"]) == dashboards
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard_pdfqueue"] == "yes"
        (name,) = cm["data"]
        assert cm["data"][name] == (CHART / "dashboards" / name).read_text().rstrip("\n")
    default = render("default")
    assert all(
        cm["metadata"]["labels"].get("grafana_dashboard") == "1"
        for cm in default.all("ConfigMap")
        if "-dashboard-" in cm["metadata"]["name"]
    )
    assert not default.all("ServiceMonitor")
    assert not default.all("PrometheusRule")
    monitor = rendered.one("ServiceMonitor", "pq-pdfqueue")
    ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    served = {p["name"] for s in rendered.all("Service") for p in s["spec"]["ports"]}
    assert ports <= served


def test_rendered_prometheus_rule_passes_promtool(tmp_path: Path) -> None:
    promtool = installed("promtool", "prometheus")
    rule = render("monitoring").one("PrometheusRule", "pq-pdfqueue")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_rendered_alert_links_to_its_runbook_under_the_base_url() -> None:
    """monitoring.runbookBaseUrl moves every runbook_url; the rest of each rule is the file's."""
    shipped = [
        rule
        for group in yaml.safe_load((CHART / "alerts/pdfqueue.rules.yaml").read_text())["groups"]
        for rule in group["rules"]
    ]
    default = render("monitoring").one("PrometheusRule", "pq-pdfqueue")
    assert [r for g in default["spec"]["groups"] for r in g["rules"]] == shipped

    base = "https://wiki.example.org/ops/pdfqueue"
    moved = render("monitoring", "--set", f"monitoring.runbookBaseUrl={base}")
    rules = [
        r for g in moved.one("PrometheusRule", "pq-pdfqueue")["spec"]["groups"] for r in g["rules"]
    ]
    assert [r["alert"] for r in rules] == [r["alert"] for r in shipped]
    for rule, original in zip(rules, shipped, strict=True):
        assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"
        assert {**rule["annotations"], "runbook_url": ""} == {
            **original["annotations"],
            "runbook_url": "",
        }
        assert {k: v for k, v in rule.items() if k != "annotations"} == {
            k: v for k, v in original.items() if k != "annotations"
        }


@pytest.mark.parametrize("unscraped", ["operator.enabled=false", "operator.metricsPort=0"])
def test_without_an_operator_to_scrape_its_alerts_are_not_shipped(unscraped: str) -> None:
    """PdfqueueOperatorDown would fire for ever where no operator target can exist."""
    rule = render("monitoring", "--set", unscraped).one("PrometheusRule", "pq-pdfqueue")
    names = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert "PdfqueueQueueStalled" in names
    assert [n for n in names if n.startswith("PdfqueueOperator")] == []
    with_operator = render("monitoring").one("PrometheusRule", "pq-pdfqueue")
    assert {"PdfqueueOperatorDown", "PdfqueueOperatorNoLeader"} <= {
        r["alert"] for g in with_operator["spec"]["groups"] for r in g["rules"]
    }


def test_crd_is_the_canonical_one() -> None:
    canonical = ROOT / "k8s/crds/pdfbatches.pdfqueue.io.yaml"
    shipped = CHART / "crds/pdfbatches.pdfqueue.io.yaml"
    assert canonical.read_bytes() == shipped.read_bytes(), (
        "charts/pdfqueue/crds/ must be a byte-identical copy: cp k8s/crds/*.yaml charts/pdfqueue/crds/"
    )
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(
        p.name for p in (ROOT / "k8s/crds").glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_kustomize_base_is_rendered_from_the_chart(tmp_path: Path) -> None:
    current = (ROOT / "k8s/base/pdfqueue.yaml").read_text()
    fresh = template(
        "--skip-tests",
        "-f",
        str(ROOT / "k8s/base-values.yaml"),
        release="pdfqueue",
        namespace="pdfqueue",
    )
    assert current.split("\n", 1)[1] == fresh, "stale: run k8s/render-base.sh"


def test_workload_identity_and_encryption_need_no_static_key(tmp_path: Path) -> None:
    """On AWS with an IAM role for the ServiceAccounts: no AWS_* key in any pod, the role's
    annotation on each ServiceAccount, and the encryption values as the settings read them."""
    role = "arn:aws:iam::123456789012:role/pdfqueue"
    rendered = render(
        "external",
        "--set", "externalS3.accessKeyId=",
        "--set", "externalS3.secretAccessKey=",
        "--set", "externalS3.endpointUrl=",
        "--set-string", f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={role}",
        "--set", "storage.sse=sse-kms",
        "--set", "storage.sseKmsKeyId=alias/pdfqueue",
        "--set", "storage.sseTenantKmsKeyIds.acme=alias/acme-pdfs",
    )  # fmt: skip
    for component in ("api", "worker", "operator"):
        workload = rendered.one("Deployment", f"-{component}")
        env = _pdfqueue_env(rendered, workload, component, tmp_path)
        assert not {name for name in env if name.startswith("AWS_") and "KEY" in name}
        settings = _settings_from_env(env)
        assert settings.s3_sse == "sse-kms"
        assert settings.s3_sse_kms_key_id == "alias/pdfqueue"
        assert settings.s3_sse_tenant_kms_key_ids == {"acme": "alias/acme-pdfs"}
    accounts = rendered.all("ServiceAccount")
    assert len(accounts) == 3
    assert all(a["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == role for a in accounts)
    refused = helm(
        "template", "pq", str(CHART), "-f", str(values_file("external")),
        "--set", "storage.sse=aes", check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "/storage/sse': value must be one of" in refused.stderr
