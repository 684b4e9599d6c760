"""Writes the chart's `values.schema.json` and parameter table from the annotations of values.yaml.

Every value in `charts/pdfqueue/values.yaml` has a `## @param name description` line (an object
the chart owns, `## @extra name description`). readme-generator-for-helm, pinned in
`devtools/chart/package.json`, reads them: it writes the `## Parameters` section of
`docs/operations/chart-values.md`, and a schema giving each value its type, description and
default. What the tool cannot know (integers, patterns, ranges, enums, the cross-value rules)
is written by hand in `charts/pdfqueue/values.schema.constraints.yaml`, keyed by the values'
dotted names; this module merges the two and closes every object the chart owns to unknown keys.

Run `uv run python -m pdfqueue_dev.chartschema` (or `make docs-refs`) after changing values.yaml
or the constraints; `tests/unit/test_generated_docs.py` fails while either output is stale.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts/pdfqueue"
VALUES = CHART / "values.yaml"
CONSTRAINTS = CHART / "values.schema.constraints.yaml"
SCHEMA = CHART / "values.schema.json"
TABLE_PAGE = ROOT / "docs/operations/chart-values.md"
TOOL_DIR = ROOT / "devtools/chart"
TOOL = TOOL_DIR / "node_modules/.bin/readme-generator"

MODIFIED_PARAM = re.compile(r"^\s*## @param (\S+) \[([^\]]*)\] ?(.*)$")
"""`## @param name [object, default: ...] description`: a value whose type the tool is told."""

Schema = dict[str, Any]


class ChartSchemaError(Exception):
    """The annotations or the constraints do not fit values.yaml; the message says where."""


def install_tool() -> Path:
    """The pinned readme-generator, installed with `npm ci` into devtools/chart/node_modules."""
    lock = TOOL_DIR / "package-lock.json"
    installed_lock = TOOL_DIR / "node_modules/.package-lock.json"
    if installed_lock.exists() and installed_lock.stat().st_mtime >= lock.stat().st_mtime:
        return TOOL
    npm = shutil.which("npm")
    if npm is None:
        raise ChartSchemaError("npm is missing: `bash tools/services.sh node` installs it")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--silent"], cwd=TOOL_DIR, check=True, timeout=600
    )
    return TOOL


def run_tool(values: Path, page: Path, workdir: Path) -> tuple[Schema, str]:
    """The tool's schema of `values`, and `page` with its `## Parameters` section rewritten."""
    schema_out, page_out = workdir / "tool.schema.json", workdir / "page.md"
    shutil.copyfile(page, page_out)
    proc = subprocess.run(
        [str(install_tool()), "-v", str(values), "-s", str(schema_out), "-r", str(page_out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:  # its log names each key missing an annotation, then a stack trace
        errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]
        detail = "\n".join(errors) or proc.stderr.strip()[-2000:]
        raise ChartSchemaError(f"readme-generator refused {values.name}:\n{detail}")
    tool_schema: Schema = json.loads(schema_out.read_text())
    return tool_schema, page_out.read_text()


def node_at(schema: Schema, dotted: str, *, create: bool = False) -> Schema:
    """The schema node of the value named `dotted` (`api.image.tag`), under nested `properties`."""
    node = schema
    for part in dotted.split("."):
        children = node.setdefault("properties", {}) if create else node.get("properties", {})
        if part not in children:
            if not create:
                raise ChartSchemaError(f"{dotted}: values.yaml has no such value")
            children[part] = {"type": "object", "properties": {}}
        node = children[part]
    return node


def _lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def add_modified_values(schema: Schema, values_text: str) -> None:
    """Describe the `[object]` and `[array]` values the way the tool describes the others.

    Those are Kubernetes objects handed through (`resources`, `updateStrategy`...) and arrays of
    numbers: the tool leaves an `[object]` value out of its schema, and gives an `[array]` its
    placeholder default with string items. Their default here is the one in values.yaml; what
    is checked inside them is the constraints file's.
    """
    values = yaml.safe_load(values_text)
    for line in values_text.splitlines():
        found = MODIFIED_PARAM.match(line)
        if not found:
            continue
        dotted, modifiers, description = found.groups()
        kinds = [m.strip() for m in modifiers.split(",") if m.strip() in ("object", "array")]
        if kinds:
            node = node_at(schema, dotted, create=True)
            node.clear()
            node.update(type=kinds[-1], description=description, default=_lookup(values, dotted))


def deep_merge(base: Schema, extra: Schema) -> Schema:
    """`base` with `extra`'s keys added; where both hold a mapping, merged; else `extra` wins."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def close_objects(node: Schema) -> None:
    """Every object with listed properties refuses keys it does not list (the chart's own).

    Maps of user-chosen keys (labels, tenants) list no properties, so they stay open to what
    their `additionalProperties` schema allows.
    """
    if "properties" in node:
        node.setdefault("additionalProperties", False)
        for child in node["properties"].values():
            close_objects(child)
    if isinstance(node.get("additionalProperties"), dict):
        close_objects(node["additionalProperties"])


def merge(tool_schema: Schema, values_text: str, constraints: Schema) -> Schema:
    """The chart's schema: the tool's, the modified values, the constraints, objects closed."""
    schema = {"$schema": constraints["root"]["$schema"], **tool_schema}
    add_modified_values(schema, values_text)
    schema = deep_merge(schema, constraints["root"])
    for dotted, rules in constraints["values"].items():
        node = node_at(schema, dotted)
        node.update(deep_merge(node, copy.deepcopy(rules)))  # YAML aliases share objects
    close_objects(schema)
    return schema


def render(values: Path = VALUES, page: Path = TABLE_PAGE) -> dict[Path, str]:
    """The schema and the table page that `values` gives, by path: compared or written."""
    with tempfile.TemporaryDirectory(prefix="chartschema-") as workdir:
        tool_schema, page_text = run_tool(values, page, Path(workdir))
    constraints = yaml.safe_load(CONSTRAINTS.read_text())
    schema = merge(tool_schema, values.read_text(), constraints)
    return {
        SCHEMA: json.dumps(schema, indent=2, ensure_ascii=False) + "\n",
        TABLE_PAGE: page_text,
    }


def main() -> int:
    try:
        outputs = render()
    except ChartSchemaError as exc:
        print(f"chartschema: {exc}", file=sys.stderr)
        return 1
    for path, text in outputs.items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
