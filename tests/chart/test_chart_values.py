"""The Helm chart's values: helm lint, every value commented with its own name, the schema
covering every value and refusing bad ones. helm only, no API server."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.support.chartfix import (
    CHART,
    PASSTHROUGH,
    VARIANTS,
    helm,
    values_file,
)

pytestmark = pytest.mark.skipif(not (CHART / "Chart.yaml").exists(), reason="no chart")


def test_every_rendered_variant_has_ci_values() -> None:
    assert set(VARIANTS) >= {"default", "external", "autoscaling-off", "monitoring", "ingress"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_helm_lint_strict(variant: str) -> None:
    out = helm("lint", str(CHART), "--strict", "-f", str(values_file(variant)))
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def _value_paths(node: Any, prefix: str = "") -> list[str]:
    paths = []
    if isinstance(node, dict):
        for key, child in node.items():
            path = f"{prefix}{key}"
            paths.append(path)
            if key not in PASSTHROUGH:
                paths += _value_paths(child, path + ".")
    return paths


def test_every_value_is_commented_with_its_own_name() -> None:
    """`## @param parent.key ...` (an object the chart owns: `## @extra parent.key ...`) right
    above every key the chart owns: the annotations the schema and the values table come from."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z][A-Za-z0-9]*):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [key])
        if not any(k in PASSTHROUGH for _, k in stack):
            above = lines[i - 1].strip() if i else ""
            if not re.match(rf"## @(param|extra) {re.escape(path)}( |$)", above):
                missing.append(path)
        stack.append((indent, key))
    assert missing == []


def test_schema_covers_every_value_and_nothing_else() -> None:
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def schema_paths(node: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for key, child in node.get("properties", {}).items():
            out.append(prefix + key)
            if key not in PASSTHROUGH:
                out += schema_paths(child, prefix + key + ".")
        return out

    def closed(node: dict[str, Any], prefix: str = "") -> list[str]:
        """Objects the chart owns refuse unknown keys."""
        bad = [] if node.get("additionalProperties") is False else [prefix or "<root>"]
        for key, child in node.get("properties", {}).items():
            if child.get("type") == "object" and key not in PASSTHROUGH:
                bad += closed(child, prefix + key + ".")
        return bad

    assert sorted(schema_paths(schema)) == sorted(_value_paths(values))
    assert closed(schema) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "worker.bogus=1"], "additional properties 'bogus' not allowed"),
        (["--set", "api.image.tag=latest"], "api/image/tag"),
        (["--set", "s3.persistence.emptyDir.medium=Disk"], "/s3/persistence/emptyDir/medium"),
        (["--set", "redis.enabled=false"], "externalRedis"),
        (["--set", "postgresql.enabled=false"], "externalDatabase"),
        (["--set", "api.uploadPartBytes=1048576"], "uploadPartBytes"),
        (["--set", "config.usersTable=users;drop"], "usersTable"),
        (["--set", "config.maxDirectoryBytes=-1"], "/config/maxDirectoryBytes"),
        (["--set", "worker.usersTenantColumn=tenant;drop"], "/worker/usersTenantColumn"),
        (["--set", "worker.extractMaxPageChars=0"], "/worker/extractMaxPageChars"),
        (["--set", "api.trustedTenants={acme,a b}"], "/api/trustedTenants/1"),
        (["--set", "api.quotas.bytesPerDay=-1"], "/api/quotas/bytesPerDay"),
        (["--set", "api.quotas.uploadsPerMinute=1.5"], "/api/quotas/uploadsPerMinute"),
        (["--set", "api.tenantQuotas.acme.bytes_per_day=0"], "'bytes_per_day' not allowed"),
        (["--set", "api.tenantQuotas.acme.bytesPerDay=-1"], "/api/tenantQuotas/acme/bytesPerDay"),
        (["--set", "api.tenantQuotas.a:b.bytesPerDay=0"], "invalid propertyName 'a:b'"),
        (["--set", "operator.namespaceTenants.Team_A=acme"], "invalid propertyName 'Team_A'"),
        (["--set", "operator.namespaceTenants.team-a=acme:x"], "/operator/namespaceTenants/team-a"),
        (["--set", "operator.namespaceTenants.team-a="], "/operator/namespaceTenants/team-a"),
        (["--set", "operator.sourcePrefix=../x"], "/operator/sourcePrefix"),
        (
            [
                *("--namespace", "pdfqueue", "--set", "api.createPdfBatches=true"),
                *("--set", "operator.namespaceTenants.pdfqueue=acme"),
            ],
            "maps the release namespace pdfqueue to acme",
        ),
        (["--set", "operator.sourcePrefix=/uploads/x"], "must be a folder other than uploads/"),
        (["--set", "operator.sourcePrefix=pdfs"], "must be a folder other than uploads/"),
        (
            ["--set", "worker.terminationGracePeriodSeconds=30"],
            "worker.terminationGracePeriodSeconds (30) must exceed worker.jobCompletionWaitSeconds (30)",
        ),
        (
            ["--set", "worker.jobTimeoutSeconds=30"],
            "worker.jobCompletionWaitSeconds (30) must exceed worker.jobTimeoutSeconds + 5 (35)",
        ),
        (
            ["--set", "operator.leaderElection.renewDeadlineSeconds=7"],
            "renewDeadlineSeconds (7) must be at most leaseDurationSeconds - 2 (6)",
        ),
        (
            ["--set", "operator.leaderElection.retryPeriodSeconds=5"],
            "retryPeriodSeconds (5) x 1.1 must be below renewDeadlineSeconds (5)",
        ),
        (["--set", "operator.replicas=0"], "/operator/replicas"),
        (["--set", "operator.peering=true"], "additional properties 'peering' not allowed"),
        (["--set", "operator.pdb.maxUnavailable=0"], "/operator/pdb/maxUnavailable"),
        (
            ["--set", "api.topologySpread.whenUnsatisfiable=Never"],
            "/api/topologySpread/whenUnsatisfiable",
        ),
        (["--set", "worker.updateStrategy.type=Sideways"], "/worker/updateStrategy/type"),
        (["--set", "worker.pdfEngine=mupdf"], "/worker/pdfEngine"),
        (["--set", "api.livenessProbe.periodSeconds=0"], "/api/livenessProbe/periodSeconds"),
        (["--set", "api.readinessProbe.bogus=1"], "additional properties 'bogus' not allowed"),
        (["--set", "redis.password=p@ss:word"], "redis.password may hold only A-Z a-z 0-9"),
        (["--set", "postgresql.password=p/w"], "postgresql.password may hold only A-Z a-z 0-9"),
        (
            ["--set", "config.extraEnv.PDFQUEUE_REDIS_URL=redis://x"],
            "config.extraEnv.PDFQUEUE_REDIS_URL: this variable comes from a Secret",
        ),
        (["--set", "worker.dispatch.tenantWeights.acme=0"], "/worker/dispatch/tenantWeights/acme"),
        (["--set", "worker.dispatch.tenantWeights.a:b=2"], "invalid propertyName 'a:b'"),
        (
            ["--set", "worker.dispatch.tenantInflightCaps.acme=0"],
            "/worker/dispatch/tenantInflightCaps/acme",
        ),
        (["--set", "worker.dispatch.tickSeconds=0"], "/worker/dispatch/tickSeconds"),
        (["--set", "worker.dispatch.windowJobs=-1"], "/worker/dispatch/windowJobs"),
        (["--set", "retention.days=1.5"], "/retention/days"),
        (["--set", "retention.days=-1"], "/retention/days"),
        (["--set-string", "retention.days=30d"], "/retention/days"),
        (["--set", "retention.tenantDays.acme=0.5"], "/retention/tenantDays/acme"),
        (["--set", "retention.tenantDays.a:b=3"], "invalid propertyName 'a:b'"),
        (["--set-string", "retention.auditDays=400d"], "/retention/auditDays"),
        (["--set", "retention.concurrencyPolicy=Sometimes"], "/retention/concurrencyPolicy"),
    ],
)
def test_bad_values_are_refused(args: list[str], message: str) -> None:
    proc = helm("template", "pq", str(CHART), "-f", str(values_file("default")), *args, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "p@ss:word" not in proc.stderr  # a password is never shown


def test_values_are_validated_in_one_helper_that_notes_include() -> None:
    """Value helpers compute; only pdfqueue.validateValues (from NOTES.txt) fails a render."""
    templates = CHART / "templates"
    failing = sorted(
        str(p.relative_to(templates))
        for p in templates.rglob("*")
        if p.is_file() and re.search(r"\{\{-?\s*fail\b", p.read_text())
    )
    assert failing == ["_validate.tpl"]
    notes = (templates / "NOTES.txt").read_text()
    assert notes.startswith('{{- include "pdfqueue.validateValues" . }}')
    users = sorted(
        str(p.relative_to(templates))
        for p in templates.rglob("*")
        if p.is_file() and "pdfqueue.validateValues" in p.read_text()
    )
    assert users == ["NOTES.txt", "_validate.tpl"]
