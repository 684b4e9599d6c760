"""The docs' reference pages match the code, their links resolve, and their figures are committed."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from pdfqueue_dev import chartschema, refdocs
from tests.support.tools import installed

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted(refdocs.PAGES))
def test_generated_page_is_current(path: str) -> None:
    expected = refdocs.PAGES[path]()
    assert (ROOT / path).read_text() == expected, f"{path} is stale: run `make docs-refs`"


def test_a_stale_page_is_noticed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above compares with what the code renders, not with itself."""
    monkeypatch.setattr(refdocs, "ROOT", tmp_path)
    refdocs.main()
    page = tmp_path / "docs/operations/settings.md"
    assert page.read_text() == refdocs.settings_page()
    page.write_text(page.read_text().replace("PDFQUEUE_MAX_TRIES", "PDFQUEUE_MAX_TRYS"))
    assert page.read_text() != refdocs.settings_page()
    refdocs.main()
    assert page.read_text() == refdocs.settings_page()


def test_an_option_without_help_text_fails_the_cli_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every argument of every command, nested ones too, says what it does."""
    real = refdocs.build_parser

    def parser_with(undescribed: str) -> argparse.ArgumentParser:
        parser = real()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = sub.choices["admin"] if undescribed == "nested" else sub.choices["status"]
        if undescribed == "nested":
            command = next(
                a for a in command._actions if isinstance(a, argparse._SubParsersAction)
            ).choices["batches"]
        command.add_argument("--undescribed", action="store_true")
        return parser

    assert "--undescribed" not in refdocs.cli_page()
    for where, prog in (("top", "pdfqueue status"), ("nested", "pdfqueue admin batches")):
        monkeypatch.setattr(refdocs, "build_parser", lambda where=where: parser_with(where))
        with pytest.raises(refdocs.UndescribedOption, match=f"{prog} --undescribed has no help"):
            refdocs.cli_page()


def test_nested_commands_have_their_own_section() -> None:
    page = refdocs.cli_page()
    assert "\n## pdfqueue admin batches\n" in page
    assert "`--stuck`" in page


@pytest.fixture(scope="module")
def chart_outputs() -> dict[Path, str]:
    """What `make docs-refs` writes for the chart now (readme-generator runs on Node.js)."""
    installed("npm", "node")
    return chartschema.render()


def test_chart_schema_and_values_table_are_current(chart_outputs: dict[Path, str]) -> None:
    assert set(chart_outputs) == {chartschema.SCHEMA, chartschema.TABLE_PAGE}
    for path, text in chart_outputs.items():
        stale = f"{path.relative_to(ROOT)} is stale: run `make docs-refs`"
        assert path.read_text() == text, stale


def test_an_edited_annotation_makes_the_schema_and_the_table_stale(
    tmp_path: Path, chart_outputs: dict[Path, str]
) -> None:
    """The check above compares with what the annotations give, not with the committed files."""
    values = tmp_path / "values.yaml"
    edited = chartschema.VALUES.read_text().replace(
        "## @param config.maxTries is PDFQUEUE_MAX_TRIES,", "## @param config.maxTries is the"
    )
    assert edited != chartschema.VALUES.read_text()
    values.write_text(edited)
    for path, text in chartschema.render(values=values).items():
        assert text != chart_outputs[path], path
        assert "is the tries of one PDF" in text, path


def test_a_value_without_an_annotation_fails_the_generation(tmp_path: Path) -> None:
    installed("npm", "node")
    values = tmp_path / "values.yaml"
    text = chartschema.VALUES.read_text()
    values.write_text(text.replace("\nconfig:\n", "\nconfig:\n  unannotated: 1\n", 1))
    with pytest.raises(
        chartschema.ChartSchemaError, match=r"Missing metadata for key: config\.unannotated"
    ):
        chartschema.render(values=values)


def test_a_constraint_on_a_value_values_yaml_lacks_fails_the_merge() -> None:
    tool_schema = {"type": "object", "properties": {"config": {"type": "object", "properties": {}}}}
    constraints = {"root": {"$schema": "x"}, "values": {"config.maxTrys": {"minimum": 1}}}
    with pytest.raises(chartschema.ChartSchemaError, match=r"config\.maxTrys: values\.yaml has no"):
        chartschema.merge(tool_schema, "config: {}\n", constraints)


def test_objects_the_chart_owns_are_closed_and_maps_of_chosen_keys_stay_open() -> None:
    """An object listing properties refuses others; a map (labels, tenants) keeps its own rule."""
    tool_schema = {
        "type": "object",
        "properties": {
            "owned": {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
            "labels": {"type": "object"},
            "tenants": {"type": "object"},
        },
    }
    constraints = {
        "root": {"$schema": "x"},
        "values": {"tenants": {"additionalProperties": {"type": "integer"}}},
    }
    schema = chartschema.merge(tool_schema, "owned: {enabled: true}\n", constraints)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["owned"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["labels"]
    assert schema["properties"]["tenants"]["additionalProperties"] == {"type": "integer"}


def _relative_links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text)
    return [link for link in links if not re.match(r"[a-z]+:|#", link)]


def test_the_readmes_links_resolve() -> None:
    """mkdocs checks the links inside docs/; the README is read on GitHub, outside the site."""
    dead = []
    for link in _relative_links(ROOT / "README.md"):
        target = link.split("#", 1)[0]
        if not (ROOT / target).exists():
            dead.append(link)
    assert dead == []


def test_every_cited_result_file_is_committed_and_every_committed_one_cited() -> None:
    """bench/results/ is ignored for new runs; a result a page cites is added with -f."""
    cited: set[str] = set()
    for page in [ROOT / "README.md", *ROOT.glob("docs/**/*.md")]:
        cited |= set(re.findall(r"bench/results/([\w.-]+\.(?:json|png))", page.read_text()))
    tracked = subprocess.run(
        ["git", "ls-files", "bench/results"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert cited, "no page cites a result file"
    assert sorted(cited - {Path(t).name for t in tracked}) == [], "cited but not committed"
    assert sorted({Path(t).name for t in tracked} - cited) == [], "committed but cited nowhere"
