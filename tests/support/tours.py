"""The docs' tours: shell blocks marked `<!-- tour: NAME -->` on the line before their fence."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tour(name: str, page: Path = ROOT / "README.md") -> str:
    """The shell block that the line `<!-- tour: NAME -->` of `page` introduces, as written."""
    lines = page.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if line.strip() == f"<!-- tour: {name} -->"]
    assert len(marks) == 1, f"{page.name}: {len(marks)} lines <!-- tour: {name} -->, not one"
    fence = marks[0] + 1
    assert re.fullmatch(r"```(sh|bash|console)?", lines[fence].strip()), (
        f"{page.name}: <!-- tour: {name} --> is not right before a ``` fence"
    )
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[fence + 1 : end]) + "\n"


def commands(block: str) -> list[str]:
    """The block's lines, continuations joined, comments dropped, blanks squeezed."""
    joined = re.sub(r"\\\n\s*", "", block)
    found = []
    for line in joined.splitlines():
        command = re.sub(r"\s+#\s.*$", "", line).strip()
        if command and not command.startswith("#"):
            found.append(re.sub(r"\s+", " ", command))
    return found
