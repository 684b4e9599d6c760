"""Dashboards and alert rules proven against a real Prometheus scraping a real API and worker.

Prometheus (Debian's package, installed by `tools/services.sh prometheus`) runs on a loopback
port with a temporary config, scraping the API and a worker started as the commands users
run, and a stand-in for the operator that exports core's operator metrics (the operator
serves them itself once it exists). After one batch, every dashboard expression must return
series, and every alert rule must load, evaluate without error, and find series for each
metric it names (an alert's full expression is rightly empty while nothing is wrong).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import (
    Child,
    free_ports,
    stop_all,
    wait_http,
    wait_until,
    wait_until_async,
)
from tests.support.dashboards import expressions
from tests.support.helpers import ACME, MakeCorpus, settings_env
from tests.support.tools import installed

ROOT = Path(__file__).parents[1]
DASHBOARDS = ROOT / "charts/pdfqueue/dashboards"
RULES = ROOT / "charts/pdfqueue/alerts/pdfqueue.rules.yaml"
RULE_TESTS = ROOT / "tests/prometheus/rules.test.yaml"
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$namespace": ".*",  # "All": matches series without the label too (no Kubernetes here)
}
OPERATOR_STAND_IN = """
import sys, time
from pdfqueue.observability import metrics
metrics.register("operator", "election")
metrics.operator_observed(desired=2, ready=1)
metrics.operator_scaled(1, 2)
metrics.operator_leading(True)
metrics.serve(int(sys.argv[1]), addr="127.0.0.1")
while True:
    time.sleep(1)
"""


def substitute(expr: str) -> str:
    for name, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr}"
    return expr


class Prometheus:
    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = self.http.get("/api/v1/query", params={"query": expr}).json()
        assert body["status"] == "success", f"{expr}: {body.get('error')}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, expr: str, ok: Any, timeout_s: float = 60) -> list[dict[str, Any]]:
        def answer() -> list[dict[str, Any]] | None:
            result = self.query(expr)
            return result if ok(result) else None

        return wait_until(answer, expr, timeout_s, interval_s=0.5)


@pytest.fixture(scope="module")
def prometheus_bin() -> Path:
    installed("promtool", "prometheus")
    return Path(installed("prometheus", "prometheus"))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[Child]]:
    """Processes the test starts, stopped (SIGTERM, then SIGKILL) at its end."""
    children: list[Child] = []
    yield children
    stop_all(reversed(children), timeout_s=30)


def test_promtool_accepts_the_rules(prometheus_bin: Path) -> None:
    promtool = prometheus_bin.with_name("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rules = sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert f"SUCCESS: {rules} rules found" in result.stdout


def test_alerts_fire_when_they_should(prometheus_bin: Path) -> None:
    """promtool's rule unit tests: synthetic series in, the expected alerts (or none) out."""
    promtool = prometheus_bin.with_name("promtool")
    result = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboards_are_well_formed() -> None:
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids)), path
        assert board["uid"].startswith("pdfqueue-")
        assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "namespace"}
        for where, expr in expressions(board):
            # Grafana's `All` must filter nothing, and no expression may name a batch.
            assert "batch_id" not in expr, (path.name, where)
            if "pdfqueue_" in expr and where.startswith("panel"):
                assert 'namespace=~"$namespace"' in expr, (path.name, where)


async def test_every_dashboard_and_alert_expression_against_real_prometheus(
    prometheus_bin: Path,
    processes: list[Child],
    settings: Settings,
    storage: Storage,
    make_corpus: MakeCorpus,
    tmp_path: Path,
) -> None:
    pdfqueue = Path(sys.executable).with_name("pdfqueue")  # `uv run pdfqueue`, without a sync
    api_port, worker_port, operator_port, prom_port = free_ports(4)
    env = settings_env(settings, PDFQUEUE_METRICS_INTERVAL_S="1")
    worker_env = {**env, "PDFQUEUE_METRICS_PORT": str(worker_port)}
    operator = [sys.executable, "-c", OPERATOR_STAND_IN, str(operator_port)]
    processes.append(Child("api", [str(pdfqueue), "api", "--port", str(api_port)], env, tmp_path))
    processes.append(Child("worker", [str(pdfqueue), "worker"], worker_env, tmp_path))
    processes.append(Child("operator", operator, None, tmp_path))
    targets = {"pdfqueue-api": api_port, "pdfqueue-worker": worker_port}
    # the job the chart's ServiceMonitor gives the operator (release pq): PdfqueueOperatorDown
    targets["pq-pdfqueue-operator-metrics"] = operator_port
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            for job, port in targets.items()
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = [
        str(prometheus_bin),
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
        "--log.level=warn",
    ]
    processes.append(Child("prometheus", prometheus, None, tmp_path))
    wait_http(f"http://127.0.0.1:{api_port}/healthz", processes)
    wait_http(f"http://127.0.0.1:{worker_port}/metrics", processes)
    wait_http(f"http://127.0.0.1:{prom_port}/-/ready", processes)
    prom = Prometheus(f"http://127.0.0.1:{prom_port}")
    try:
        await run_batch_and_check(prom, processes, make_corpus, api_port, len(targets))
    finally:
        prom.http.close()


async def run_batch_and_check(
    prom: Prometheus, processes: list[Child], make_corpus: MakeCorpus, api_port: int, up: int
) -> None:
    prom.wait_for("sum(up)", lambda r: r and float(r[0]["value"][1]) == up)

    # One batch through the real processes.
    corpus, path = await make_corpus(24, seed=21)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{api_port}",
        headers=ACME,
        timeout=30,
    ) as client:
        created = await client.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        assert created.status_code == 202, created.text
        batch_id = created.json()["batch_id"]

        async def completed() -> bool:
            for child in processes:
                child.check_alive()
            status = (await client.get(f"/v1/batches/{batch_id}")).json()
            return status["status"] == "COMPLETED"

        await wait_until_async(completed, f"batch {batch_id} completed", 90)
    prom.wait_for(
        "sum(pdfqueue_documents_total)",
        lambda r: r and float(r[0]["value"][1]) == len(corpus.files),
    )
    await asyncio.sleep(3)  # a few more scrapes, so rates see the batch end

    # The API and the worker each reach PostgreSQL, and watch the batches' progress.
    up = prom.wait_for("pdfqueue_postgres_up", lambda r: len(r) == 2)
    assert {(r["metric"]["job"], r["value"][1]) for r in up} == {
        ("pdfqueue-api", "1"),
        ("pdfqueue-worker", "1"),
    }
    ages = prom.query("pdfqueue_batch_oldest_progress_age_seconds")
    assert {r["metric"]["job"] for r in ages} == {"pdfqueue-api", "pdfqueue-worker"}
    hooks = prom.query("pdfqueue_webhook_deliveries_total")
    assert {r["metric"]["result"] for r in hooks} == {
        "delivered",
        "retried",
        "gave_up",
        "refused",
    }

    # Every dashboard expression returns series.
    evaluated, empty = 0, []
    for board in sorted(DASHBOARDS.glob("*.json")):
        for where, expr in expressions(json.loads(board.read_text())):
            evaluated += 1
            if not prom.query(substitute(expr)):
                empty.append(f"{board.name} {where}: {expr}")
    assert not empty, "expressions without series:\n" + "\n".join(empty)
    assert evaluated >= 40

    # Every alert rule loaded and evaluates cleanly; every metric it names has series.
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    loaded = prom.wait_for(
        "vector(1)",  # any query: the condition below polls the rules API
        lambda _: all(
            r["health"] == "ok"
            for g in prom.http.get("/api/v1/rules").json()["data"]["groups"]
            for r in g["rules"]
        ),
    )
    assert loaded
    loaded_rules = [
        r for g in prom.http.get("/api/v1/rules").json()["data"]["groups"] for r in g["rules"]
    ]
    assert sorted(r["name"] for r in loaded_rules) == sorted(r["alert"] for r in rules)
    missing = []
    for rule in rules:
        prom.query(rule["expr"])  # raises on any evaluation error
        for metric in set(re.findall(r"\bpdfqueue_[a-z_]+\b", rule["expr"])):
            if not prom.query(f"count({metric})"):
                missing.append(f"{rule['alert']}: {metric}")
    assert not missing, "alert rules name metrics without series:\n" + "\n".join(missing)
    # A healthy run raises no alert, not even a pending one.
    assert [r["name"] for r in loaded_rules if r["state"] != "inactive"] == []
