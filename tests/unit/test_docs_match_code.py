"""What the docs name exists in the code: settings, CLI command lines, chart values, metrics, alerts.

Each check reads the names from the pages and looks each up where it is defined (the settings
class, the real argparse parser, values.yaml, the metrics module, the rules file), so a renamed
or removed thing fails here instead of misleading a reader.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram

from pdfqueue.cli.main import build_parser
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "charts/pdfqueue/templates/NOTES.txt"
DASHBOARDS = sorted((ROOT / "charts/pdfqueue/dashboards").glob("*.json"))
"""Their titles and descriptions name commands, metrics and alerts too."""
PAGES = [ROOT / "README.md", NOTES, *sorted((ROOT / "docs").rglob("*.md")), *DASHBOARDS]
GENERATED_CLI_PAGE = ROOT / "docs/user-guide/cli-reference.md"
"""Its usage lines come from the parser itself (`[-h]`, `{a,b}`): not command lines to run."""
VALUES = ROOT / "charts/pdfqueue/values.yaml"
RULES = ROOT / "charts/pdfqueue/alerts/pdfqueue.rules.yaml"
SCHEMA = [
    ROOT / "core/src/pdfqueue/stores/postgres/schema.py",
    *sorted((ROOT / "core/src/pdfqueue/stores/postgres/migrations").glob("*.sql")),
]
"""Where the PostgreSQL tables and indexes are created."""

NOT_SETTINGS = {
    "PDFQUEUE_URL": (
        "the CLI's client commands: default of --url",
        "core/src/pdfqueue/cli/main.py",
    ),
    "PDFQUEUE_TOKEN": (
        "the CLI's client commands: default of --token",
        "core/src/pdfqueue/cli/main.py",
    ),
    "PDFQUEUE_S3_DATA": (
        "where the services script's versitygw keeps objects",
        "tools/services.sh",
    ),
    "PDFQUEUE_BENCH_CACHE": ("the benchmark's corpus cache", "bench/corpus.py"),
    "PDFQUEUE_PODS": ("the test suite's real-pod switch", "tests/support/podsmode.py"),
    "PDFQUEUE_PODS_DIR": ("the real-pod tests' node state", "tests/test_e2e_pods.py"),
    "PDFQUEUE_UPDATE_SCREENSHOTS": (
        "the page tests rewrite docs' screenshots",
        "tests/test_page.py",
    ),
}
"""`PDFQUEUE_*` variables the docs may name that are no setting: why, and the file reading it."""


def page_name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def code_blocks(page: Path) -> list[str]:
    """The fenced blocks of a markdown page; NOTES.txt is all commands and prose, a dashboard
    has none."""
    if page.suffix == ".json":
        return []
    if page.suffix != ".md":
        return [page.read_text()]
    return re.findall(r"^\s*```[^\n]*\n(.*?)^\s*```", page.read_text(), re.S | re.M)


def inline_code(page: Path) -> list[str]:
    text = re.sub(r"^\s*```.*?^\s*```", "", page.read_text(), flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", text)


# --- settings -------------------------------------------------------------------------------


def setting_variables() -> set[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", [alias]) if alias else [f"PDFQUEUE_{name.upper()}"]
        names |= {str(c) for c in choices}
    return names


def test_every_variable_named_is_a_setting_or_a_listed_other_one() -> None:
    known = setting_variables() | set(NOT_SETTINGS)
    unknown = {
        (name, page_name(page))
        for page in PAGES
        for name in re.findall(r"\bPDFQUEUE_[A-Z0-9_]*[A-Z0-9]", page.read_text())
        if name not in known
    }
    assert sorted(unknown) == [], "no such setting in core/src/pdfqueue/domain/settings/"


@pytest.mark.parametrize("name", sorted(NOT_SETTINGS))
def test_each_listed_other_variable_is_no_setting_and_read_where_it_says(name: str) -> None:
    _, reader = NOT_SETTINGS[name]
    assert name not in setting_variables(), f"{name} is a setting now: drop it from NOT_SETTINGS"
    assert re.search(rf"\b{name}\b", (ROOT / reader).read_text()), f"{reader} no longer reads it"


# --- CLI ------------------------------------------------------------------------------------

SHELL_STOPS = {"|", ">", ">>", "2>", "&", "&&", ";", "||", "<"}


def command_lines(page: Path) -> Iterator[tuple[str, list[str]]]:
    """Each `pdfqueue ...` line of the page's code blocks: the line and its arguments."""
    for block in code_blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            found = re.match(r"\s*(?:\$ )?(?:uv run )?pdfqueue\s+(?!\{\{)(.*)", line)
            if not found:
                continue
            text = re.sub(r"<[^>]*>", "PLACEHOLDER", found.group(1))
            words = []
            for word in shlex.split(text, comments=True):
                if word in SHELL_STOPS:
                    break
                words.append(word)
            yield line.strip(), words


def documented_commands() -> list[tuple[str, str, list[str]]]:
    return [
        (page_name(page), line, words)
        for page in PAGES
        if page != GENERATED_CLI_PAGE
        for line, words in command_lines(page)
    ]


def test_the_docs_show_command_lines_to_check() -> None:
    """The extraction finds the commands it is meant to (an empty list passes nothing)."""
    lines = {line for _, line, _ in documented_commands()}
    assert any(line.startswith("pdfqueue purge --dry-run") for line in lines)
    assert any(line.startswith("uv run pdfqueue worker") for line in lines)


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def parse_error(parser: argparse.ArgumentParser, words: list[str]) -> str | None:
    """argparse's complaint about `pdfqueue WORDS`, or None if they parse."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(words)
        except SystemExit as exc:
            return err.getvalue().strip() or f"exit {exc.code}"
    return None


def test_every_command_line_in_the_docs_parses(parser: argparse.ArgumentParser) -> None:
    failures = []
    for page, line, words in documented_commands():
        error = parse_error(parser, words)
        if error:
            failures.append(f"{page}: {line}\n    {error.splitlines()[-1]}")
    assert failures == [], "\n".join(failures)


def test_a_command_line_with_an_unknown_option_does_not_parse(
    parser: argparse.ArgumentParser,
) -> None:
    assert parse_error(parser, ["status", "3f2a", "--json"]) is None
    assert "unrecognized arguments: --times" in (
        parse_error(parser, ["status", "3f", "--times"]) or ""
    )


def subcommand(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The parser of the (nested) command the words name."""
    for word in words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
    return parser


def test_every_option_named_beside_a_command_in_the_prose_exists(
    parser: argparse.ArgumentParser,
) -> None:
    """`pdfqueue admin batches --stuck` in a sentence: the command and its options exist."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    wrong = []
    for page in PAGES:
        for span in inline_code(page):
            found = re.match(r"(?:uv run )?pdfqueue ([a-z][\w-]*)(.*)", span)
            if not found or found.group(1) == "COMMAND":
                continue
            words = [found.group(1), *found.group(2).split()]
            if words[0] not in sub.choices:
                wrong.append(f"{page_name(page)}: `{span}`: no command {words[0]}")
                continue
            command = subcommand(parser, words)
            options = {o for a in command._actions for o in a.option_strings}
            for word in words:
                option = word.strip("[]").split("=")[0]
                if option.startswith("--") and option not in options:
                    wrong.append(f"{page_name(page)}: `{span}`: no option {option}")
    assert wrong == [], "\n".join(wrong)


# --- chart values ---------------------------------------------------------------------------

FILE_SUFFIXES = {"yaml", "yml", "json", "md", "py", "txt", "tpl", "sh", "zip", "csv", "io", "com"}


def value_exists(values: Any, path: str) -> bool:
    """A dotted path of values.yaml; inside a map that is empty by default any key goes."""
    node = values
    for key in path.split("."):
        if isinstance(node, dict) and not node:
            return True  # a map of the user's (auth.apiTokens.acme, tenants.hr)
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def value_paths(page: Path, values: dict[str, Any]) -> set[str]:
    text = page.read_text()
    found = set(re.findall(r"\.Values\.([\w.]+)", text))
    found |= set(re.findall(r"--set(?:-string|-file|-json)?[ =]([A-Za-z][\w.]*)=", text))
    spans = inline_code(page) + ([text] if page == NOTES else [])
    for span in spans:
        for path in re.findall(
            r"(?<![\w./$-])([a-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)+)", span
        ):
            head, *_, last = path.split(".")
            if head in values and last not in FILE_SUFFIXES:
                found.add(path)
    return found


def test_every_chart_value_named_exists_in_values_yaml() -> None:
    values = yaml.safe_load(VALUES.read_text())
    named = {(path, page_name(page)) for page in PAGES for path in value_paths(page, values)}
    assert len(named) > 100, "the extraction finds the docs' values"
    missing = sorted((path, page) for path, page in named if not value_exists(values, path))
    assert missing == [], "not in charts/pdfqueue/values.yaml"


def test_a_removed_value_is_noticed() -> None:
    values = yaml.safe_load(VALUES.read_text())
    assert value_exists(values, "operator.updateStrategy")
    assert value_exists(values, "auth.apiTokens.acme")
    assert not value_exists(values, "operator.peering")


# --- metrics and alerts ---------------------------------------------------------------------


def metric_names() -> set[str]:
    """Every series name the metrics module exports, with the suffixes Prometheus adds."""
    names = set()
    for metric in vars(metrics).values():
        if isinstance(metric, Counter | Gauge | Histogram):
            suffixes = {
                "counter": ("", "_total", "_created"),
                "gauge": ("",),
                "histogram": ("", "_bucket", "_sum", "_count", "_created"),
            }[metric._type]
            names |= {metric._name + s for s in suffixes}
    return names


def not_metrics() -> set[str]:
    """Other `pdfqueue_*` names: PostgreSQL tables and indexes, and the workspace's packages."""
    schema = set()
    for source in SCHEMA:
        schema |= set(re.findall(r"\bpdfqueue_\w+", source.read_text()))
    schema |= {f"{name}_pkey" for name in schema}
    packages = {p.name for p in ROOT.glob("*/src/pdfqueue_*") if p.is_dir()}
    return schema | packages


def test_every_metric_named_is_defined() -> None:
    defined = metric_names()
    others = not_metrics()
    unknown = set()
    for page in PAGES:
        for name, star in re.findall(r"\b(pdfqueue_\w*?)(_?\*)?(?!\w)", page.read_text()):
            if star:
                known = any(m.startswith(name) for m in defined)
            else:
                known = name in defined or name in others
            if not known:
                unknown.add((name + star, page_name(page)))
    assert sorted(unknown) == [], "not in core/src/pdfqueue/observability/metrics.py"


def alert_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_every_alert_named_is_in_the_prometheus_rule() -> None:
    alerts = alert_names()
    assert "PdfqueueBatchStuck" in alerts
    unknown = {
        (name, page_name(page))
        for page in PAGES
        for name in re.findall(r"\bPdfqueue[A-Z]\w*", page.read_text())
        if name not in alerts
    }
    assert sorted(unknown) == [], f"not an alert of {RULES.relative_to(ROOT)}"
