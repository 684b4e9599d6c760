"""Every alert links to its runbook, and every alert has rule tests that fire it and keep it quiet.

The rules file is read as Prometheus reads it; the chart's rewriting of runbook_url to
monitoring.runbookBaseUrl is tested with the other renders in tests/chart/test_chart_templates.py.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "charts/pdfqueue/alerts/pdfqueue.rules.yaml"
RULE_TESTS = ROOT / "tests/prometheus/rules.test.yaml"
RUNBOOKS = ROOT / "docs/operations/runbooks.md"
VALUES = ROOT / "charts/pdfqueue/values.yaml"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def anchors(markdown: str) -> set[str]:
    """The ids mkdocs gives the document's level-2 headings (its default slugs: lower case,
    punctuation dropped, spaces to hyphens)."""
    found = set()
    for title in re.findall(r"^## (.+?)\s*$", markdown, re.M):
        slug = re.sub(r"[^\w\s-]", "", title).strip().lower()
        found.add(re.sub(r"[-\s]+", "-", slug))
    return found


def test_every_alert_links_to_its_own_runbook_section() -> None:
    base = yaml.safe_load(VALUES.read_text())["monitoring"]["runbookBaseUrl"]
    sections = anchors(RUNBOOKS.read_text())
    names = [rule["alert"] for rule in alerts()]
    assert len(names) == len(set(names))
    for rule in alerts():
        url = rule["annotations"]["runbook_url"]
        assert url == f"{base}#{rule['alert'].lower()}", rule["alert"]
        assert url.rpartition("#")[2] in sections, f"no section ## {rule['alert']} in {RUNBOOKS}"


def test_every_runbook_section_is_an_alert() -> None:
    """A section without its alert is stale (a renamed or removed alert)."""
    sections = anchors(RUNBOOKS.read_text())
    assert sections == {rule["alert"].lower() for rule in alerts()}


def test_every_alert_is_proven_to_fire_and_to_stay_quiet() -> None:
    """Each alert has a promtool case where it fires and one where it is expected not to."""
    cases: dict[str, set[bool]] = defaultdict(set)
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in test.get("alert_rule_test", []):
            cases[check["alertname"]].add(bool(check.get("exp_alerts")))
    for rule in alerts():
        assert cases[rule["alert"]] == {True, False}, rule["alert"]


def test_runbooks_link_only_to_sections_that_exist() -> None:
    text = RUNBOOKS.read_text()
    links = set(re.findall(r"\]\(#([\w-]+)\)", text))
    assert links <= anchors(text)
