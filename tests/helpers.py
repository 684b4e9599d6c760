"""Helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from pdfqueue.samples import Corpus

MakeCorpus = Callable[..., Awaitable[tuple[Corpus, Path]]]
RunWorker = Callable[..., Awaitable[Any]]


async def upload(api: httpx.AsyncClient, path: Path) -> str:
    response = await api.post(
        "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
    )
    assert response.status_code == 202, response.text
    batch_id: str = response.json()["batch_id"]
    return batch_id
