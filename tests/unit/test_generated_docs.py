"""The docs' reference pages match the code, their links resolve, and their figures are committed."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from pdfqueue_dev import refdocs

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
