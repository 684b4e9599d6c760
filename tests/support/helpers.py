"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.samples import Corpus

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
