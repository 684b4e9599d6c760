"""Settings parsing and the import layer contract (core imports no service, services no peer)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from pdfqueue.domain.settings import Settings
from pdfqueue_api.auth import tenant_for


def test_tokens_plain_and_hashed() -> None:
    digest = hashlib.sha256(b"s3cret").hexdigest()
    plain = "plain-token-" + "x" * 21  # 32 characters, the shortest allowed
    settings = Settings(api_tokens=f"acme:{plain}, globex:sha256:{digest}")
    assert tenant_for(settings.api_tokens, plain) == "acme"
    assert tenant_for(settings.api_tokens, "s3cret") == "globex"
    assert tenant_for(settings.api_tokens, f"sha256:{digest}") is None  # the hash is no token
    assert tenant_for(settings.api_tokens, "nope") is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("api_tokens", "no-colon", "tenant:token"),
        ("users_table", "users; DROP TABLE x", "plain"),
        ("upload_part_bytes", "1024", "5 MiB"),
    ],
)
def test_bad_settings_say_what_is_wrong(field: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**{field: value})


def test_shutdown_rule_is_enforced() -> None:
    with pytest.raises(ValueError, match="must exceed"):
        Settings(job_timeout_s=30, job_completion_wait_s=20).check_shutdown_rule()
    with pytest.raises(ValueError, match="must exceed"):  # arq's limit is the timeout + 5 s
        Settings(job_timeout_s=20, job_completion_wait_s=24).check_shutdown_rule()
    Settings(job_timeout_s=20, job_completion_wait_s=26).check_shutdown_rule()


def test_import_layers() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [lint_imports, "--no-cache"], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Contracts: \d+ kept, 0 broken", result.stdout), result.stdout


def test_readme_documents_every_setting() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    missing = [
        f"PDFQUEUE_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if field.validation_alias is None and f"`PDFQUEUE_{name.upper()}`" not in readme
    ]
    assert missing == []
