"""The docs' tours: README's Kubernetes block is the one install.md explains, line for line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.tours import ROOT, commands, tour

INSTALL = ROOT / "docs/operations/install.md"


def _section(page: str, title: str) -> str:
    """The text of the `## title` section of `page`."""
    return re.split(r"^## ", page.split(f"\n## {title}\n", 1)[1], maxsplit=1, flags=re.M)[0]


def test_every_command_of_the_readme_kubernetes_tour_is_in_install_md_s_trial() -> None:
    readme = commands(tour("kubernetes"))
    assert readme[0].startswith("export PDFQUEUE_URL=http://127.0.0.1:8000"), readme
    assert any(c.startswith("helm install pdfqueue charts/pdfqueue") for c in readme), readme
    trial = commands(_section(INSTALL.read_text(), "A trial in Kubernetes"))
    assert [c for c in readme if c not in trial] == []


def test_a_tour_is_the_fenced_block_right_after_its_marker(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n<!-- tour: x -->\n```sh\necho a \\\n  b   # why\n# a note\necho c\n```\nmore\n"
    )
    assert tour("x", page) == "echo a \\\n  b   # why\n# a note\necho c\n"
    assert commands(tour("x", page)) == ["echo a b", "echo c"]
    page.write_text("<!-- tour: x -->\ntext\n```sh\necho a\n```\n")
    with pytest.raises(AssertionError, match="not right before"):
        tour("x", page)
