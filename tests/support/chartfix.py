"""Rendering charts/pdfqueue with the cached helm, and reading what it rendered."""

from __future__ import annotations

import base64
import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/pdfqueue"
TOOLS = Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools")) / "bin"
HELM = TOOLS / "helm"
KUBECTL = TOOLS / "kubectl"
VARIANTS = sorted(p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*-values.yaml"))


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def values_file(variant: str) -> Path:
    return CHART / "ci" / f"{variant}-values.yaml"


def template(*args: str, release: str = "pq", namespace: str = "pdfqueue") -> str:
    """`helm template` output as text."""
    return helm("template", release, str(CHART), "--namespace", namespace, *args).stdout


@dataclass(frozen=True)
class Rendered:
    """The objects of one render, each with the template file it came from."""

    objects: list[tuple[str, dict[str, Any]]]

    @classmethod
    def parse(cls, text: str) -> Rendered:
        objects = []
        for chunk in re.split(r"^---\s*$", text, flags=re.M):
            source = re.search(r"^# Source: (\S+)", chunk, re.M)
            doc = yaml.safe_load(chunk)
            if doc:
                objects.append((source.group(1) if source else "", doc))
        return cls(objects)

    def all(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [d for _, d in self.objects if kind is None or d["kind"] == kind]

    def one(self, kind: str, name_suffix: str) -> dict[str, Any]:
        found = [d for d in self.all(kind) if d["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"{kind} *{name_suffix}: {[d['metadata']['name'] for d in found]}"
        return found[0]

    def secret_value(self, name: str, key: str, *, existing_ok: bool = False) -> str:
        """A key of a rendered Secret; with `existing_ok`, a placeholder for a Secret the chart
        expects to exist already (existingSecret values)."""
        found = [d for d in self.all("Secret") if d["metadata"]["name"] == name]
        if not found and existing_ok:
            return f"<existing {name}/{key}>"
        assert found, f"Secret {name} is neither rendered nor allowed to exist already"
        secret = found[0]
        if key in secret.get("stringData", {}):
            return str(secret["stringData"][key])
        return base64.b64decode(secret["data"][key]).decode()

    def mounted_secret(
        self, workload: dict[str, Any], container: str, path: str, *, existing_ok: bool = False
    ) -> str:
        """The content of the file at `path` in a container, from a mounted Secret volume."""
        spec = workload["spec"]["template"]["spec"]
        c = next(x for x in spec["containers"] if x["name"] == container)
        mount = next(m for m in c.get("volumeMounts", []) if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])["secret"]
        name = path.removeprefix(mount["mountPath"] + "/")
        items = {i["path"]: i["key"] for i in volume.get("items", [])}
        key = items[name] if items else name
        return self.secret_value(volume["secretName"], key, existing_ok=existing_ok)

    def container_env(
        self,
        workload: dict[str, Any],
        container: str,
        *,
        init: bool = False,
        namespace: str = "",
        existing_ok: bool = False,
    ) -> dict[str, str]:
        """The environment Kubernetes would give a container: envFrom ConfigMaps and Secrets,
        then env with secretKeyRef/configMapKeyRef resolved and $(VAR) expanded in order."""
        spec = workload["spec"]["template"]["spec"]
        pool = spec.get("initContainers", []) if init else spec["containers"]
        c = next(x for x in pool if x["name"] == container)
        env: dict[str, str] = {}
        for src in c.get("envFrom", []):
            if "configMapRef" in src:
                cm = next(
                    d
                    for d in self.all("ConfigMap")
                    if d["metadata"]["name"] == src["configMapRef"]["name"]
                )
                env.update({k: str(v) for k, v in cm.get("data", {}).items()})
            if "secretRef" in src:
                sec = next(
                    d
                    for d in self.all("Secret")
                    if d["metadata"]["name"] == src["secretRef"]["name"]
                )
                env.update(
                    {
                        k: self.secret_value(sec["metadata"]["name"], k)
                        for k in {**sec.get("data", {}), **sec.get("stringData", {})}
                    }
                )
        for item in c.get("env", []):
            if "value" in item:
                env[item["name"]] = expand(str(item["value"]), env)
            elif "secretKeyRef" in item.get("valueFrom", {}):
                ref = item["valueFrom"]["secretKeyRef"]
                env[item["name"]] = self.secret_value(
                    ref["name"], ref["key"], existing_ok=existing_ok
                )
            elif "fieldRef" in item.get("valueFrom", {}):
                path = item["valueFrom"]["fieldRef"]["fieldPath"]
                assert path == "metadata.namespace", path
                env[item["name"]] = namespace
            else:
                raise AssertionError(f"unsupported env source {item}")
        return env


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' dependent variables: $(NAME) of an earlier variable; $$ escapes."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


PASSTHROUGH = {  # Kubernetes objects handed through as they are: their keys are not the chart's
    "resources",
    "podSecurityContext",
    "containerSecurityContext",
    "nodeSelector",
    "affinity",
    "tolerations",
    "podAnnotations",
    "podLabels",
    "annotations",
    "labels",
    "commonLabels",
    "extraEnv",
    "apiTokens",
    "namespaceTenants",  # maps whose keys are namespaces and tenants, checked by the schema
    "tenantQuotas",
    "tenantWeights",
    "tenantInflightCaps",
    "tenantDays",
    "sseTenantKmsKeyIds",
    "scripts",  # initdb scripts: file names the user chooses, checked by the schema
    "updateStrategy",  # a Kubernetes DeploymentStrategy
    "namespaceSelector",
    "podSelector",
}
LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
}
SELECTOR = {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}
WORKLOADS = ("Deployment", "StatefulSet")


@functools.cache
def render(variant: str, *args: str, namespace: str = "pdfqueue") -> Rendered:
    """One `helm template` of a ci/ variant (cached: tests only read what it returns)."""
    return Rendered.parse(template("-f", str(values_file(variant)), *args, namespace=namespace))
