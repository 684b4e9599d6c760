"""The Grafana dashboards' panels and PromQL expressions, for the tests that check them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too; rows themselves are not panels."""
    queue = list(dashboard["panels"])
    while queue:
        panel = queue.pop(0)
        queue += panel.get("panels", [])
        if panel["type"] != "row":
            yield panel


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target, annotation and query variable."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield f"annotation {annotation['name']!r}", annotation["expr"]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found = re.fullmatch(r"label_values\((.+),\s*\w+\)", query["query"])
            assert found, query
            yield f"variable {variable['name']!r}", found.group(1)
