"""Commands the suite runs, installed by `tools/services.sh` when missing: a test never skips
for want of one (`make test` installs them before pytest; here is the same, on demand)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "tools/services.sh"


def installed(command: str, group: str) -> str:
    """The path of `command`, after `tools/services.sh GROUP` installs it if it is missing.

    Where it cannot be installed (no root, no network) the test fails and says why: a skip
    would let a machine without the tool pass the suite without running the test.
    """
    found = shutil.which(command)
    if found is not None:
        return found
    proc = subprocess.run(
        ["bash", str(SERVICES), group], capture_output=True, text=True, timeout=900, check=False
    )
    found = shutil.which(command)
    if found is None:
        pytest.fail(
            f"{command} is not installed and `tools/services.sh {group}` could not install it"
            f" (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}",
            pytrace=False,
        )
    return found
