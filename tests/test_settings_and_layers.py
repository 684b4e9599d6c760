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
from pdfqueue.domain.tenants import tenant_for
from pdfqueue_worker.app import build_worker


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


def test_a_worker_runs_four_jobs_per_parsing_process_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings(extract_processes=1).max_jobs == 4  # the chart's pod
    assert Settings(extract_processes=2).max_jobs == 8
    assert Settings(extract_processes=2, worker_max_jobs=3).max_jobs == 3
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert Settings().parsing_processes == 6  # one per CPU
    assert Settings().max_jobs == 24
    # the operator's fallback per replica: one parser's jobs, not 4 per CPU of the operator's node
    assert Settings().replica_jobs == 4
    assert Settings(worker_max_jobs=6).replica_jobs == 6
    with pytest.raises(ValidationError):
        Settings(worker_max_jobs=-1)


async def test_the_worker_takes_its_jobs_from_max_jobs(settings: Settings) -> None:
    worker = build_worker(settings.model_copy(update={"worker_max_jobs": 0}))
    try:
        assert worker.max_jobs == 4 * settings.extract_processes
    finally:
        await worker.close()


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


def test_the_settings_reference_documents_every_setting() -> None:
    page = (Path(__file__).parents[1] / "docs/operations/settings.md").read_text()
    missing = [
        f"PDFQUEUE_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if field.validation_alias is None and f"`PDFQUEUE_{name.upper()}`" not in page
    ]
    assert missing == []


def test_service_passwords_go_into_urls_that_carry_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's way: URLs from a ConfigMap, passwords from Secret references."""
    monkeypatch.setenv("PDFQUEUE_REDIS_URL", "redis://pq-redis:6379/0")
    monkeypatch.setenv("PDFQUEUE_REDIS_PASSWORD", "r3dis-Pass_word.~")
    monkeypatch.setenv("PDFQUEUE_DATABASE_URL", "postgresql://app@pq-db:5432/app?sslmode=disable")
    monkeypatch.setenv("PDFQUEUE_DATABASE_PASSWORD", "pg-pass")
    settings = Settings()
    assert settings.redis_url == "redis://:r3dis-Pass_word.~@pq-redis:6379/0"
    assert settings.database_url == "postgresql://app:pg-pass@pq-db:5432/app?sslmode=disable"
    assert "pg-pass" not in repr(settings.database_password)
    monkeypatch.delenv("PDFQUEUE_REDIS_PASSWORD")
    monkeypatch.delenv("PDFQUEUE_DATABASE_PASSWORD")
    assert Settings().redis_url == "redis://pq-redis:6379/0"  # no password: the URL as it is


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"redis_url": "redis://:inline@r:6379/0", "redis_password": "other"},
            "PDFQUEUE_REDIS_URL carries a password and PDFQUEUE_REDIS_PASSWORD is set",
        ),
        (
            {"database_url": "postgresql://u:inline@db/x", "database_password": "other"},
            "PDFQUEUE_DATABASE_URL carries a password and PDFQUEUE_DATABASE_PASSWORD is set",
        ),
        (
            {"redis_url": "redis://r:6379/0", "redis_password": "a@b/c"},
            "PDFQUEUE_REDIS_PASSWORD may hold only",
        ),
    ],
)
def test_service_passwords_are_refused_without_being_echoed(
    values: dict[str, str], message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        Settings(**values)
    assert "inline" not in str(caught.value)
    assert "other" not in str(caught.value)
    assert "a@b" not in str(caught.value)
