"""Deployment fails closed: the chart and k8s/ refuse an open API, confine every pod, ship no secret.

Rendered with the cached helm (tests/support/chartfix.py); the kustomize tests use the cached kubectl.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdfqueue_dev.processes import Child, free_port, wait_until
from tests.support.chartfix import (
    CHART,
    KUBECTL,
    ROOT,
    VARIANTS,
    Rendered,
    helm,
    template,
    values_file,
)
from tests.support.kubefix import KubeCluster
from tests.support.tools import installed

HASH = "sha256:" + "ab" * 32
PLAIN = "plain-token-of-forty-characters-0123456"
METADATA = ipaddress.ip_address("169.254.169.254")
WORKLOADS = ("Deployment", "StatefulSet")


@functools.cache
def render(variant: str, *args: str) -> Rendered:
    return Rendered.parse(template("-f", str(values_file(variant)), *args))


def refused(*args: str) -> str:
    """helm template's error text; the render must fail."""
    proc = helm("template", "pq", str(CHART), *args, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    return proc.stderr


# ---- item 5: an API without tokens is not rendered, an anonymous one is never exposed ----------


def test_the_default_values_refuse_an_api_without_tokens() -> None:
    err = refused()
    assert "auth.apiTokens is empty and auth.existingSecret is unset" in err
    assert "auth.allowAnonymous=true" in err


def test_an_anonymous_api_needs_the_explicit_value_and_stays_inside() -> None:
    rendered = Rendered.parse(template("--set", "auth.allowAnonymous=true"))
    api = rendered.one("Deployment", "-api")
    env = rendered.container_env(api, "api", namespace="pdfqueue")
    assert env["PDFQUEUE_ALLOW_ANONYMOUS"] == "true"
    assert "PDFQUEUE_API_TOKENS" not in env
    assert rendered.mounted_secret(api, "api", env["PDFQUEUE_API_TOKENS_FILE"]) == ""
    assert rendered.all("Ingress") == []
    assert rendered.one("Service", "-api")["spec"]["type"] == "ClusterIP"
    tokens = Rendered.parse(template("-f", str(values_file("default"))))
    env = tokens.container_env(tokens.one("Deployment", "-api"), "api", namespace="pdfqueue")
    assert "PDFQUEUE_ALLOW_ANONYMOUS" not in env  # only ever set on purpose


@pytest.mark.parametrize(
    "extra",
    [
        [],  # no token at all
        ["--set", f"auth.apiTokens.acme={PLAIN}"],  # tokens do not make the flag safe to expose
        ["--set", "auth.existingSecret=tokens"],
    ],
)
def test_an_anonymous_api_is_never_rendered_behind_an_ingress(extra: list[str]) -> None:
    err = refused("--set", "auth.allowAnonymous=true", "--set", "api.ingress.enabled=true", *extra)
    assert "auth.allowAnonymous=true with api.ingress.enabled=true" in err


def test_an_anonymous_api_is_never_rendered_behind_a_load_balancer() -> None:
    err = refused("--set", "auth.allowAnonymous=true", "--set", "api.service.type=LoadBalancer")
    assert "auth.allowAnonymous=true with api.service.type=LoadBalancer" in err


# ---- item 6: hashes or long tokens, checked, never echoed -----------------------------------------


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("short-token", "auth.apiTokens.acme: a plain token needs 32 characters or more"),
        ("sha256:" + "AB" * 32, "auth.apiTokens.acme: a hash is sha256: followed by 64 lowercase"),
        ("sha256:" + "ab" * 31 + "a", "auth.apiTokens.acme"),
        ("sha256:" + "ab" * 32 + "00", "auth.apiTokens.acme"),
        ("sha256:" + "zz" * 32, "auth.apiTokens.acme"),
    ],
)
def test_a_malformed_token_is_refused_without_showing_it(token: str, message: str) -> None:
    err = refused("--set", f"auth.apiTokens.acme={token}")
    assert message in err
    assert token not in err
    assert token.removeprefix("sha256:") not in err


def test_one_token_for_two_tenants_is_refused_without_showing_it() -> None:
    err = refused(
        "--set", f"auth.apiTokens.acme={PLAIN}", "--set", f"auth.apiTokens.globex={PLAIN}"
    )
    assert "auth.apiTokens.acme and auth.apiTokens.globex hold the same token" in err
    assert PLAIN not in err


def test_hashes_and_long_tokens_are_stored_as_given() -> None:
    rendered = Rendered.parse(
        template("--set", f"auth.apiTokens.acme={PLAIN}", "--set", f"auth.apiTokens.globex={HASH}")
    )
    secret = rendered.one("Secret", "-api-tokens")
    value = rendered.secret_value(secret["metadata"]["name"], "api-tokens")
    assert value == f"acme:{PLAIN},globex:{HASH}"


# ---- item 15: NetworkPolicies, egress included ------------------------------------------------


def _policy_for(rendered: Rendered, workload: dict[str, Any]) -> dict[str, Any]:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    matching = [
        p
        for p in rendered.all("NetworkPolicy")
        if all(labels.get(k) == v for k, v in p["spec"]["podSelector"]["matchLabels"].items())
    ]
    assert len(matching) == 1, (workload["metadata"]["name"], len(matching))
    return matching[0]


def _pods(component: str) -> dict[str, Any]:
    return {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "pdfqueue",
                "app.kubernetes.io/instance": "pq",
                "app.kubernetes.io/component": component,
            }
        }
    }


DNS = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
}
BUNDLED = [
    {"to": [_pods("redis")], "ports": [{"port": 6379, "protocol": "TCP"}]},
    {"to": [_pods("postgresql")], "ports": [{"port": 5432, "protocol": "TCP"}]},
    {"to": [_pods("s3")], "ports": [{"port": 7070, "protocol": "TCP"}]},
]
KUBE_API = {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_pod_has_one_policy_for_both_directions(variant: str) -> None:
    rendered = render(variant)
    for workload in [w for kind in WORKLOADS for w in rendered.all(kind)]:
        policy = _policy_for(rendered, workload)
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"], policy["metadata"]["name"]


def test_the_worker_reaches_only_dns_and_its_three_stores() -> None:
    rendered = render("default")
    policy = _policy_for(rendered, rendered.one("Deployment", "-worker"))
    assert policy["spec"]["egress"] == [DNS, *BUNDLED]
    assert policy["spec"]["ingress"] == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {}}, "podSelector": {"matchLabels": {}}}
            ],
            "ports": [{"port": 9100, "protocol": "TCP"}],
        }
    ]


def test_only_the_operator_and_a_pdfbatch_creating_api_reach_the_kubernetes_api() -> None:
    rendered = render("default")
    operator = _policy_for(rendered, rendered.one("Deployment", "-operator"))
    assert operator["spec"]["egress"] == [DNS, *BUNDLED, KUBE_API]
    api = _policy_for(rendered, rendered.one("Deployment", "-api"))
    assert api["spec"]["egress"] == [DNS, *BUNDLED]  # api.createPdfBatches is off
    assert api["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    pinned = Rendered.parse(
        template(
            "-f",
            str(values_file("default")),
            "--set",
            "api.createPdfBatches=true",
            "--set-json",
            'networkPolicy.kubeApi={"cidrs": ["172.18.0.2/32"], "ports": [6443]}',
        )
    )
    api = _policy_for(pinned, pinned.one("Deployment", "-api"))
    assert api["spec"]["egress"][-1] == {
        "to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}],
        "ports": [{"port": 6443, "protocol": "TCP"}],
    }


def test_the_bundled_stores_admit_only_this_releases_pdfqueue_pods_and_reach_nothing() -> None:
    rendered = render("default")
    for component, port in (("redis", "redis"), ("postgresql", "postgresql"), ("s3", "s3")):
        policy = _policy_for(rendered, rendered.one("StatefulSet", f"-{component}"))
        assert policy["spec"]["egress"] == []
        (rule,) = policy["spec"]["ingress"]
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]
        (peer,) = rule["from"]
        assert set(peer) == {"podSelector"}
        exprs = {e["key"]: e["values"] for e in peer["podSelector"]["matchExpressions"]}
        clients = ["api", "worker", "operator", "retention"]
        if component != "redis":  # the migration Job needs the database and the bucket only
            clients.append("migrate")
        assert exprs["app.kubernetes.io/component"] == clients
        assert exprs["app.kubernetes.io/instance"] == ["pq"]


def _reachable(rule: dict[str, Any], address: ipaddress.IPv4Address) -> bool:
    """Does an egress rule let traffic to `address` through (on some port)?"""
    peers = rule.get("to")
    if not peers:
        return True
    for peer in peers:
        block = peer.get("ipBlock")
        if block is None:
            continue  # pods chosen by label: never the metadata address or the API server
        inside = address in ipaddress.ip_network(block["cidr"])
        excepted = any(address in ipaddress.ip_network(e) for e in block.get("except", []))
        if inside and not excepted:
            return True
    return False


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_worker_never_reaches_the_metadata_address(variant: str) -> None:
    rendered = render(variant)
    policy = _policy_for(rendered, rendered.one("Deployment", "-worker"))
    assert not [r for r in policy["spec"]["egress"] if _reachable(r, METADATA)]
    for rule in policy["spec"]["egress"]:  # no port of the Kubernetes API, to any address
        ports = {p["port"] for p in rule.get("ports", [])}
        assert rule.get("to"), rule
        assert 6443 not in ports, rule
        assert 443 not in ports or variant == "external", rule  # external-values: S3 on 443


def test_external_stores_are_reached_only_at_their_addresses() -> None:
    rendered = render("external")
    policy = _policy_for(rendered, rendered.one("Deployment", "-worker"))
    assert policy["spec"]["egress"] == [
        DNS,
        {
            "to": [{"ipBlock": {"cidr": "10.20.0.10/32"}}],
            "ports": [{"port": 6379, "protocol": "TCP"}],
        },
        {
            "to": [{"ipBlock": {"cidr": "10.20.1.0/24"}}],
            "ports": [{"port": 5432, "protocol": "TCP"}],
        },
        {
            "to": [{"ipBlock": {"cidr": "10.20.2.0/24"}}],
            "ports": [{"port": 443, "protocol": "TCP"}],
        },
    ]
    kube_api = ipaddress.ip_address("10.96.0.1")
    assert not [r for r in policy["spec"]["egress"] if _reachable(r, kube_api)]


def test_an_external_store_without_addresses_is_any_address_but_link_local() -> None:
    rendered = Rendered.parse(
        template(
            "-f", str(values_file("external")), "--set-json", "networkPolicy.external.s3.cidrs=[]"
        )
    )
    policy = _policy_for(rendered, rendered.one("Deployment", "-worker"))
    s3 = policy["spec"]["egress"][3]
    assert s3 == {
        "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}}],
        "ports": [{"port": 443, "protocol": "TCP"}],
    }
    assert not _reachable(s3, METADATA)


def test_metrics_are_scraped_only_by_the_configured_prometheus() -> None:
    rendered = render("monitoring")
    for name, port in (("-worker", 9100), ("-operator", 9100)):
        policy = _policy_for(rendered, rendered.one("Deployment", name))
        assert policy["spec"]["ingress"] == [
            {
                "from": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                        },
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                    }
                ],
                "ports": [{"port": port, "protocol": "TCP"}],
            }
        ]


def test_policies_can_be_turned_off() -> None:
    rendered = Rendered.parse(
        template("-f", str(values_file("default")), "--set", "networkPolicy.enabled=false")
    )
    assert rendered.all("NetworkPolicy") == []


# ---- item 15: the Redis password is never on a command line -----------------------------------


def _secret_values(rendered: Rendered) -> set[str]:
    values = set()
    for secret in rendered.all("Secret"):
        for raw in secret.get("data", {}).values():
            values.add(base64.b64decode(raw).decode())
        values.update(str(v) for v in secret.get("stringData", {}).values())
    for value in list(values):  # tenant:token lists: each token too
        values.update(pair.partition(":")[2] for pair in value.split(",") if ":" in pair)
    return {v for v in values if len(v) >= 6}


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    pod = spec.get("template", {}).get("spec") or (spec if obj["kind"] == "Pod" else {})
    return [*pod.get("containers", []), *pod.get("initContainers", [])]


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_secret_is_on_any_command_line(variant: str) -> None:
    rendered = render(variant)
    secrets = _secret_values(rendered)
    assert secrets or variant == "external"
    for obj in rendered.all():
        for c in _containers(obj):
            secret_vars = {
                e["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
            }
            line = " ".join(c.get("command", []) + c.get("args", []))
            assert not [s for s in secrets if s in line], (obj["metadata"]["name"], c["name"])
            expanded = set(re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", line))
            assert not expanded & secret_vars, (obj["metadata"]["name"], c["name"], expanded)
            probes = [
                c.get(p, {}).get("exec", {}).get("command", [])
                for p in ("livenessProbe", "readinessProbe")
            ]
            assert not [p for p in probes if "-a" in p or any("$REDIS" in a for a in p)], probes


def test_redis_reads_its_password_from_a_file_made_from_the_secret() -> None:
    rendered = render("default")
    redis = rendered.one("StatefulSet", "-redis")
    pod = redis["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][-2:] == ["--include", "/run/redis/auth.conf"]
    assert "requirepass" in c["command"][2]
    assert "/etc/redis-secret/password" in c["command"][2]
    assert [e["name"] for e in c["env"]] == ["REDISCLI_AUTH"]  # for redis-cli in the probes
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["secret"]["secret"]["secretName"] == "pq-pdfqueue-redis"
    assert volumes["secret"]["secret"]["items"] == [{"key": "redis-password", "path": "password"}]
    assert volumes["run"]["emptyDir"]["medium"] == "Memory"


def _redis_cli(port: int, password: str | None) -> str:
    env = {"PATH": os.environ["PATH"], **({"REDISCLI_AUTH": password} if password else {})}
    proc = subprocess.run(
        ["redis-cli", "-p", str(port), "ping"],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
        env=env,
    )
    return proc.stdout.strip() + proc.stderr.strip()


def test_the_rendered_redis_command_really_requires_the_password_it_never_shows(
    tmp_path: Path,
) -> None:
    """Run the StatefulSet's own command and args (paths moved under tmp_path) with a real
    redis-server: clients need the Secret's password, and it is on no command line."""
    installed("redis-server", "redis")
    rendered = render("default")
    (c,) = rendered.one("StatefulSet", "-redis")["spec"]["template"]["spec"]["containers"]
    password = rendered.secret_value("pq-pdfqueue-redis", "redis-password")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret/password").write_text(password)
    (tmp_path / "run").mkdir()
    moves = {"/etc/redis-secret": "secret", "/run/redis": "run", "/data": "data"}

    def local(arg: str) -> str:
        for inside, here in moves.items():
            arg = arg.replace(inside, str(tmp_path / here))
        return arg

    (tmp_path / "data").mkdir()
    port = free_port()
    argv = [local(a) for a in c["command"] + c["args"]] + [
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
    ]
    server = Child("redis", argv, {"PATH": os.environ["PATH"]}, tmp_path)
    try:

        def answers() -> bool | None:
            server.check_alive()
            return _redis_cli(port, password) == "PONG" or None

        wait_until(answers, "redis-server answering with the password", 30, interval_s=0.1)
        assert "NOAUTH" in _redis_cli(port, None)
        assert "WRONGPASS" in _redis_cli(port, "not-the-password")
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode()
        assert cmdline.startswith("redis-server")  # the shell exec'd into it
        assert password not in cmdline
        auth = tmp_path / "run/auth.conf"
        assert auth.stat().st_mode & 0o777 == 0o600
    finally:
        server.stop(timeout_s=10)


# ---- item 14: k8s/ ships no secret, is namespaced, widens only through its overlay -----------


def test_k8s_ships_no_credential() -> None:
    base = yaml.safe_load((ROOT / "k8s/base/kustomization.yaml").read_text())
    for generator in base["secretGenerator"]:
        assert set(generator) == {"name", "envs"}, generator  # no literals, no committed files
        for env in generator["envs"]:
            assert not (ROOT / "k8s/base" / env).exists() or _ignored(ROOT / "k8s/base" / env)
    rendered = (ROOT / "k8s/base/pdfqueue.yaml").read_text()
    assert "kind: Secret\n" not in rendered
    for path in (ROOT / "k8s").rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".yml", ".env"):
            assert "change-me" not in path.read_text(), path


def _ignored(path: Path) -> bool:
    proc = subprocess.run(
        ["git", "check-ignore", "-q", str(path)], cwd=ROOT, check=False, capture_output=True
    )
    return proc.returncode == 0


def test_k8s_operator_is_namespaced() -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "k8s/base/pdfqueue.yaml").read_text()) if d]
    operator = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "pdfqueue-operator"
    )
    assert operator["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "operator",
        "--namespace=pdfqueue",
    ]
    rbac = [d for d in yaml.safe_load_all((ROOT / "k8s/rbac/operator.yaml").read_text()) if d]
    for role in [d for d in rbac if d["kind"] == "ClusterRole"]:  # only reads at cluster scope
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule  # read-only
            assert set(rule["resources"]) <= {"customresourcedefinitions", "namespaces"}, rule
    roles = [d for d in rbac if d["kind"] == "Role"]  # its own, and its leader election's
    assert {r["metadata"]["name"] for r in roles} == {
        "pdfqueue-operator",
        "pdfqueue-operator-leader-election",
    }
    assert {r["metadata"]["namespace"] for r in roles} == {"pdfqueue"}
    assert any("pods" in rule["resources"] for r in roles for rule in r["rules"])


def kustomize(path: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return proc


@pytest.fixture
def k8s_copy(tmp_path: Path) -> Path:
    """k8s/ as a fresh checkout has it: without generated secrets."""
    copy = tmp_path / "k8s"
    shutil.copytree(ROOT / "k8s", copy, ignore=shutil.ignore_patterns("*.env"))
    return copy


def generate_secrets(k8s: Path, tenant: str = "default") -> str:
    proc = subprocess.run(
        ["bash", str(k8s / "generate-secrets.sh"), tenant],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PDFQUEUE_SECRETS_DIR": str(k8s / "base/secrets")},
    )
    return proc.stdout.strip()


def _secrets(built: str) -> dict[str, dict[str, str]]:
    return {
        d["metadata"]["name"].rsplit("-", 1)[0]: {
            k: base64.b64decode(v).decode() for k, v in d["data"].items()
        }
        for d in yaml.safe_load_all(built)
        if d and d["kind"] == "Secret"
    }


@pytest.mark.kube
def test_k8s_refuses_to_build_without_generated_secrets(k8s_copy: Path) -> None:
    proc = kustomize(k8s_copy, check=False)
    assert proc.returncode != 0
    assert "secrets/api-tokens.env" in proc.stderr or "secrets/" in proc.stderr


@pytest.mark.kube
def test_k8s_secrets_are_random_and_keep_only_the_tokens_hash(
    k8s_copy: Path, tmp_path: Path
) -> None:
    import hashlib

    token = generate_secrets(k8s_copy, "acme")
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    first = _secrets(kustomize(k8s_copy).stdout)
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert first["pdfqueue-api-tokens"] == {"api-tokens": f"acme:sha256:{digest}"}
    assert re.fullmatch(r"[0-9a-f]{64}", first["pdfqueue-redis"]["redis-password"])
    again = subprocess.run(
        ["bash", str(k8s_copy / "generate-secrets.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PDFQUEUE_SECRETS_DIR": str(k8s_copy / "base/secrets")},
    )
    assert again.returncode == 1
    assert "exists" in again.stderr
    other = tmp_path / "other"
    shutil.copytree(ROOT / "k8s", other, ignore=shutil.ignore_patterns("*.env"))
    generate_secrets(other)
    second = _secrets(kustomize(other).stdout)
    for name, keys in first.items():
        for key, value in keys.items():
            assert second[name][key] != value, (name, key)


@pytest.mark.kube
def test_cluster_wide_is_an_explicit_overlay(k8s_copy: Path) -> None:
    generate_secrets(k8s_copy)
    docs = [d for d in yaml.safe_load_all(kustomize(k8s_copy / "cluster-wide").stdout) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("ClusterRole", "pdfqueue-operator") in kinds
    assert ("ClusterRoleBinding", "pdfqueue-operator") in kinds
    assert ("Role", "pdfqueue-operator") not in kinds
    assert ("RoleBinding", "pdfqueue-operator") not in kinds
    operator = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "pdfqueue-operator"
    )
    assert operator["spec"]["template"]["spec"]["containers"][0]["args"] == ["operator"]
    # the Lease stays in namespace pdfqueue, so does the right to it
    assert ("Role", "pdfqueue-operator-leader-election") in kinds
    namespaced = [d for d in yaml.safe_load_all(kustomize(k8s_copy).stdout) if d]
    assert [
        d
        for d in namespaced
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "pdfqueue-operator"
    ] == []


@pytest.mark.kube
@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ("acme:short-token", "Secret tokens key api-tokens, tenant acme: a plain token needs 32"),
        (f"acme:{PLAIN},globex:{PLAIN}", "tenant acme and Secret tokens key api-tokens, tenant"),
        ("acme:sha256:" + "AB" * 32, "tenant acme: a hash is sha256: followed by 64 lowercase"),
        (f"{PLAIN}", "Secret tokens key api-tokens: an entry is not tenant:token"),
        (None, "Secret tokens key api-tokens: no such key"),
    ],
)
def test_an_existing_secrets_tokens_are_checked_when_the_cluster_is_read(
    kube_cluster: KubeCluster, tokens: str | None, message: str
) -> None:
    ns = kube_cluster.create_namespace("tokens")
    data = ["--from-literal", f"api-tokens={tokens}"] if tokens else ["--from-literal", "x=y"]
    kube_cluster.kubectl("create", "secret", "generic", "tokens", "-n", ns, *data)
    args = ["template", "pq", str(CHART), "-n", ns, "--dry-run=server"]
    proc = kube_cluster.helm(*args, "--set", "auth.existingSecret=tokens", check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    for secret in (PLAIN, "short-token", "AB" * 32):
        assert secret not in proc.stderr


@pytest.mark.kube
def test_an_existing_secret_with_hashes_and_long_tokens_renders(kube_cluster: KubeCluster) -> None:
    ns = kube_cluster.create_namespace("tokens")
    value = f"acme:{PLAIN}, globex:{HASH}"
    kube_cluster.kubectl(
        "create", "secret", "generic", "tokens", "-n", ns, "--from-literal", f"api-tokens={value}"
    )
    args = ["template", "pq", str(CHART), "-n", ns, "--dry-run=server"]
    proc = kube_cluster.helm(*args, "--set", "auth.existingSecret=tokens")
    assert "kind: Deployment" in proc.stdout
