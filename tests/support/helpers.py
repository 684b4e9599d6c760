"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.corpora.samples import Corpus

ACME_TOKEN = "acme-test-token-0123456789abcdef0123456789"
"""Tenant acme's token, stored in clear in the tests' settings (32+ characters, as required)."""
GLOBEX_TOKEN = "globex-test-token-fedcba9876543210fedcba98"
"""Tenant globex's token, stored only as its sha256 in the tests' settings."""
ACME = {"Authorization": f"Bearer {ACME_TOKEN}"}
GLOBEX = {"Authorization": f"Bearer {GLOBEX_TOKEN}"}

MakeCorpus = Callable[..., Awaitable[tuple[Corpus, Path]]]
RunWorker = Callable[..., Awaitable[Any]]


async def upload(api: httpx.AsyncClient, path: Path) -> str:
    response = await api.post(
        "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
    )
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    return batch_id


async def run_batch(
    api: httpx.AsyncClient, run_worker: RunWorker, tmp_path: Path, files: dict[str, bytes]
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """Upload a ZIP of `files` (member name → bytes), run the worker until it is idle, and
    return the completed batch's status and its CSV report's rows by member name."""
    path = tmp_path / "batch.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    batch_id = await upload(api, path)
    await run_worker()
    status: dict[str, Any] = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    report = (await api.get(f"/v1/batches/{batch_id}/files?format=csv")).text
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(report))}
    return status, rows


async def linked_user_ids(db: asyncpg.Connection, settings: Settings) -> set[int]:
    """The ids of the users whose PDF is linked (`pdf_url` set), in the tests' users table."""
    rows = await db.fetch(f'SELECT id FROM "{settings.users_table}" WHERE pdf_url IS NOT NULL')
    return {r["id"] for r in rows}


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The test's settings as the PDFQUEUE_* variables a separate process reads."""
    env = dict(os.environ)
    for name, field in Settings.model_fields.items():
        value = getattr(settings, name)
        if field.validation_alias is not None or value is None:
            continue
        if value == field.get_default(call_default_factory=True):
            continue  # the other process has the same default
        if name == "api_tokens":
            value = ",".join(f"{tenant}:{token}" for token, tenant in value.items())
        elif name == "operator_namespace_tenants":
            value = ",".join(f"{ns}:{tenant}" for ns, tenant in value.items())
        elif isinstance(value, set | frozenset | list | tuple):
            value = ",".join(sorted(str(v) for v in value))
        elif isinstance(value, dict):
            value = json.dumps({k: _plain(v) for k, v in value.items()})
        env[f"PDFQUEUE_{name.upper()}"] = str(value)
    env.update(extra)
    return env


def _plain(value: Any) -> Any:
    """A settings value as JSON would carry it (a pydantic model as its fields)."""
    return value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value
