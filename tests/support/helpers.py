"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

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
