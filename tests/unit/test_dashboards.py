"""The Grafana dashboards read right: every panel has a unit and one kind of quantity per axis,
names only metrics pdfqueue defines, sits on the grid without overlapping another, and what a
dashboard tells the reader to run prints what it promises.

Grafana's dashboard-linter could not be built here (the Go module proxy refuses one of its
dependencies), so these are its rules that apply to us, and ours; tests/test_prometheus.py
evaluates every expression on a real Prometheus.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pdfqueue.cli.main import build_parser, print_summary
from tests.support.dashboards import expressions, panels
from tests.unit.test_docs_match_code import ROOT, metric_names

BOARDS = sorted((ROOT / "charts/pdfqueue/dashboards").glob("*.json"))
OTHER_METRICS = {
    "up": "Prometheus's own, per scraped target",
    "process_resident_memory_bytes": "prometheus_client's process collector, in every process",
}
"""Series a panel may use that pdfqueue does not define: whose they are."""
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "rate", "irate", "increase", "histogram_quantile",
    "time", "vector", "label_values", "offset", "bool", "topk", "bottomk", "clamp_min",
    "clamp_max", "abs", "delta", "deriv", "changes", "resets", "absent", "scalar", "sort",
}  # fmt: skip
UNITS = {
    "seconds": {"s", "ms", "dtdurations"},
    "bytes": {"bytes", "decbytes", "Bps", "binBps"},
    "bool": {"bool", "bool_yes_no", "bool_on_off"},
    "count": {"short", "none", "ops", "reqps", "percentunit", "percent"},
}
"""The Grafana units that fit each kind of quantity a PromQL expression gives."""


def board(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def series_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (label matchers, groupings, ranges and
    strings left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    words = set(re.findall(r"(?<![\w.$])[a-zA-Z_:][\w:]*", text))
    return words - PROMQL_WORDS


def kind(expr: str) -> str:
    """What an expression measures, from its metrics' names: seconds, bytes, bool or count."""
    kinds = set()
    measured = re.split(r"\b(?:and|unless)\b", expr)[0]  # the right side only filters
    for name in series_names(measured):
        base = re.sub(r"_(total|created)$", "", name)
        if base.endswith("_count"):
            kinds.add("count")  # a histogram's count of observations, whatever it measures
        elif re.search(r"_seconds(_bucket|_sum)?$", base):
            kinds.add("seconds")
        elif re.search(r"_bytes(_bucket|_sum)?$", base) or re.search(r"what=\"bytes\"", expr):
            kinds.add("bytes")
        elif base.endswith("_up") and not re.match(r"\s*(sum|count)\b", expr):
            kinds.add("bool")
        else:
            kinds.add("count")
    if expr.lstrip().startswith("time() -"):
        return "seconds"  # the age of a timestamp
    assert len(kinds) == 1, f"{expr} mixes {kinds}"
    return kinds.pop()


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_every_panel_has_a_unit_that_fits_each_of_its_series(path: Path) -> None:
    wrong = []
    for panel in panels(board(path)):
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if not unit:
            wrong.append(f"{panel['title']!r}: no unit")
            continue
        overridden = {
            o["matcher"]["options"]: p["value"]
            for o in panel["fieldConfig"].get("overrides", [])
            for p in o["properties"]
            if p["id"] == "unit"
        }
        for target in panel["targets"]:
            series_unit = overridden.get(target.get("legendFormat"), unit)
            if series_unit not in UNITS[kind(target["expr"])]:
                wrong.append(
                    f"{panel['title']!r} {target['refId']}: {kind(target['expr'])} in {series_unit}"
                )
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_one_axis_shows_one_kind_of_quantity(path: Path) -> None:
    """Job counts and seconds on one axis make one of them unreadable: split the panel (or give
    the odd series its own unit and axis through an override)."""
    mixed = []
    for panel in panels(board(path)):
        overridden = {o["matcher"]["options"] for o in panel["fieldConfig"].get("overrides", [])}
        kinds = {
            kind(t["expr"]) for t in panel["targets"] if t.get("legendFormat") not in overridden
        }
        if len(kinds) > 1:
            mixed.append(f"{panel['title']!r}: {sorted(kinds)}")
    assert mixed == [], "\n".join(mixed)


def test_the_unit_checks_notice_a_mixed_panel() -> None:
    assert kind('max(pdfqueue_queue_ready_jobs{namespace=~"$namespace"})') == "count"
    assert kind("max(pdfqueue_queue_oldest_ready_age_seconds)") == "seconds"
    assert kind("sum(rate(pdfqueue_http_request_duration_seconds_count[5m]))") == "count"
    assert kind("min(pdfqueue_storage_up)") == "bool"
    assert kind("time() - max(pdfqueue_heartbeat_timestamp_seconds)") == "seconds"


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_every_expression_names_only_defined_metrics(path: Path) -> None:
    defined = metric_names() | set(OTHER_METRICS)
    unknown = [
        f"{where}: {name}"
        for where, expr in expressions(board(path))
        for name in sorted(series_names(expr))
        if name not in defined
    ]
    assert unknown == [], "not in core/src/pdfqueue/observability/metrics.py:\n" + "\n".join(
        unknown
    )


def test_the_metric_check_reads_promql() -> None:
    expr = (
        'sum by (le, stage) (rate(pdfqueue_stage_duration_seconds_bucket{namespace=~"$x",'
        ' stage!="read"}[$__rate_interval])) and on (instance) up'
    )
    assert series_names(expr) == {"pdfqueue_stage_duration_seconds_bucket", "up"}
    assert "pdfqueue_storage_upp" not in metric_names()


@pytest.mark.parametrize("path", BOARDS, ids=lambda p: p.name)
def test_panels_tile_the_grid_and_query_the_chosen_datasource(path: Path) -> None:
    taken: dict[tuple[int, int], str] = {}
    dashboard = board(path)
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']!r} overlaps {taken[(x, y)]!r}"
                taken[(x, y)] = panel["title"]
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
    titles = [p["title"] for p in panels(dashboard)]
    assert len(titles) == len(set(titles)), "two panels of one title"


def test_the_overview_shows_stores_stuck_batches_webhooks_and_removed_data() -> None:
    used = {
        name for _, expr in expressions(board(ROOT / "charts/pdfqueue/dashboards/overview.json"))
        for name in series_names(expr)
    }  # fmt: skip
    assert {
        "pdfqueue_redis_up",
        "pdfqueue_postgres_up",
        "pdfqueue_storage_up",
        "pdfqueue_batch_oldest_progress_age_seconds",
        "pdfqueue_webhook_deliveries_total",
        "pdfqueue_data_removed_total",
    } <= used


# --- what the batch dashboard tells the reader to run --------------------------------------

STATUS = {
    "batch_id": "3f2a",
    "status": "COMPLETED",
    "total_files": 2,
    "processed": 2,
    "linked": 2,
    "skipped_no_match": 0,
    "skipped_already_exists": 0,
    "failed": 0,
    "created_at": "2026-12-03T10:00:00+00:00",
    "completed_at": "2026-12-03T10:05:00+00:00",
}


def printed_by(command: str) -> str:
    """What `pdfqueue status ...` prints for a finished batch (the real printer)."""
    try:
        args = build_parser().parse_args(command.split()[1:])
    except SystemExit:
        pytest.fail(f"`{command}` does not parse")
    assert args.run.__name__ == "cmd_status", f"{command}: only status is understood here"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_summary(STATUS, as_json=args.format == "json")
    return out.getvalue()


def test_the_batch_dashboard_names_a_command_that_prints_the_times_to_set() -> None:
    texts = [
        board(ROOT / "charts/pdfqueue/dashboards/batch.json")["description"],
        (ROOT / "docs/operations/observability.md").read_text(),
    ]
    for text in texts:
        said = re.findall(r"created_at`? to (?:its )?`?completed_at`?\s*\(`(pdfqueue [^`]+)`", text)
        assert said, "the text no longer says where the times come from"
        for command in said:
            printed = printed_by(command.replace("BATCH_ID", "3f2a"))
            assert STATUS["created_at"] in printed, f"{command} does not print created_at"
            assert STATUS["completed_at"] in printed, f"{command} does not print completed_at"


def test_the_plain_status_table_has_no_times() -> None:
    """Why the dashboard asks for --json (if the table gains them, drop --json there)."""
    assert STATUS["created_at"] not in printed_by("pdfqueue status 3f2a")
