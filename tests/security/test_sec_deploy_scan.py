"""A policy scanner (checkov) finds nothing in the rendered chart or in k8s/, beyond the exceptions
justified one by one in .checkov.yaml.

checkov runs in its own environment (`uv tool run`, pinned): as a workspace dependency it would
pin boto3, botocore and packaging years back for every package.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chartfix import CHART, KUBECTL, ROOT, VARIANTS, Rendered, template, values_file

CHECKOV = "checkov==3.3.30"
CONFIG = ROOT / ".checkov.yaml"


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local/bin/uv")
    assert Path(found).exists(), "uv not found"
    return found


def _kustomized(tmp_path: Path, overlay: str) -> str:
    k8s = tmp_path / "k8s"
    if not k8s.exists():
        shutil.copytree(ROOT / "k8s", k8s, ignore=shutil.ignore_patterns("*.env"))
        subprocess.run(
            ["bash", str(k8s / "generate-secrets.sh")],
            check=True,
            capture_output=True,
            env={"PATH": "/usr/bin:/bin", "PDFQUEUE_SECRETS_DIR": str(k8s / "base/secrets")},
        )
    proc = subprocess.run(
        [str(KUBECTL), "kustomize", str(k8s / overlay)],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout


def _manifests(tmp_path: Path) -> Path:
    """One file per render: every ci/ variant of the chart, and both k8s/ kustomizations."""
    out = tmp_path / "manifests"
    out.mkdir()
    for variant in VARIANTS:
        rendered = template("-f", str(values_file(variant)))
        (out / f"chart-{variant}.yaml").write_text(rendered)
    (out / "k8s.yaml").write_text(_kustomized(tmp_path, "."))
    (out / "k8s-cluster-wide.yaml").write_text(_kustomized(tmp_path, "cluster-wide"))
    return out


def _checkov(directory: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [
            _uv(),
            "tool",
            "run",
            "--from",
            CHECKOV,
            "checkov",
            "--config-file",
            str(CONFIG),
            "-d",
            str(directory),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )
    assert proc.stdout.strip(), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    (kube,) = [r for r in reports if r.get("check_type") == "kubernetes"]
    return dict(kube)


@pytest.mark.kube
@pytest.mark.timeout(900)
def test_checkov_finds_nothing_but_the_justified_exceptions(tmp_path: Path) -> None:
    report = _checkov(_manifests(tmp_path))
    failed = [
        (f["check_id"], f["resource"], Path(f["file_path"]).name)
        for f in report["results"]["failed_checks"]
    ]
    assert failed == [], failed
    assert report["summary"]["parsing_errors"] == 0
    scanned = {Path(f["file_path"]).name for f in report["results"]["passed_checks"]}
    assert scanned == {f"chart-{v}.yaml" for v in VARIANTS} | {"k8s.yaml", "k8s-cluster-wide.yaml"}
    # Skips that checkov reports are the inline ones (annotations, each with its reason); those
    # of .checkov.yaml are not run at all.
    inline = {
        m.group(1): m.group(2)
        for path in (CHART / "templates").rglob("*.yaml")
        for m in re.finditer(r'checkov\.io/skip\d+: "(CKV\w+)=([^"]+)"', path.read_text())
    }
    assert all(len(reason) > 20 for reason in inline.values()), inline
    skipped = {f["check_id"] for f in report["results"]["skipped_checks"]}
    assert skipped == set(inline)
    listed = set(yaml.safe_load(CONFIG.read_text())["skip-check"])
    assert not listed & set(inline)


@pytest.mark.parametrize("variant", VARIANTS)
def test_only_pods_calling_the_kubernetes_api_mount_a_token(variant: str) -> None:
    """What .checkov.yaml's CKV_K8S_38 exception relies on."""
    rendered = Rendered.parse(template("-f", str(values_file(variant))))
    needs = {"operator"} | (
        {"api"} if "createPdfBatches: true" in values_file(variant).read_text() else set()
    )
    for obj in rendered.all():
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec") or (spec if obj["kind"] == "Pod" else None)
        if pod is None:
            continue
        component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
        assert pod["automountServiceAccountToken"] is (component in needs), obj["metadata"]["name"]
    assert CHART.exists()
