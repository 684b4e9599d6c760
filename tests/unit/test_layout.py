"""Where code may reach: neither the tests nor the dev tools import the bench; what they share
with it (the corpora, the process helpers) lives in pdfqueue_dev."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_no_test_imports_the_bench() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m == "bench" or m.startswith("bench.")
        )
        for path in sorted((ROOT / "tests").rglob("*.py"))
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}
