"""No test skips for want of a command that `make test` installs: it is installed, or it fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.tools import installed

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def test_no_test_skips_when_a_command_is_missing() -> None:
    """A skip on `shutil.which` lets a fresh machine pass without running the test (the chart's
    promtool check did, whenever it ran before the test that installed Prometheus)."""
    skips = re.compile(r"(skipif|pytest\.skip)\((?:(?!\)\s*\n\s*def ).){0,200}shutil\.which", re.S)
    found = [
        str(p.relative_to(ROOT))
        for p in sorted(TESTS.rglob("*.py"))
        if p != Path(__file__) and skips.search(p.read_text())
    ]
    assert found == []


def test_make_test_installs_every_command_the_tests_install() -> None:
    """What tests/support/tools.py would install mid-run, `make test` installs before pytest."""
    wanted = set()
    for path in sorted(TESTS.rglob("*.py")):
        wanted |= set(re.findall(r'installed\(\s*"[^"]+",\s*"(\w+)"\s*\)', path.read_text()))
    assert wanted >= {"prometheus", "redis", "chromium"}
    recipe = re.search(r"^test:.*?\n((?:\t.*\n|#.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe is not None
    before_pytest = recipe.group(1).split("pytest")[0]
    provided = set(re.findall(r"services\.sh (\w+)", before_pytest))
    provided |= {"redis"} if "services.sh start" in before_pytest else set()
    assert wanted <= provided


def test_a_command_that_cannot_be_installed_fails_the_test() -> None:
    with pytest.raises(pytest.fail.Exception, match="could not install it"):
        installed("pdfqueue-no-such-command", "no-such-group")
