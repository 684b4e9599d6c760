"""Errors are typed once at the stores' edge; each knows its status; lists derive from them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

import pdfqueue
import pdfqueue_api
import pdfqueue_operator
import pdfqueue_worker
from pdfqueue.domain.errors import PdfQueueError, transient_reason, transient_reasons
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from tests.support.helpers import ACME, MakeCorpus

ROOT = Path(__file__).resolve().parent.parent
CLOSED = "127.0.0.1:1"
"""A port nothing listens on: the store there is down."""


@pytest.mark.parametrize(
    ("store", "override"),
    [
        ("storage", {"s3_endpoint_url": f"http://{CLOSED}"}),
        ("postgresql", {"database_url": f"postgresql://pdfqueue@{CLOSED}/pdfqueue"}),
        ("redis", {"redis_url": f"redis://{CLOSED}/0"}),
    ],
)
async def test_a_store_down_during_an_upload_answers_503_and_leaves_nothing(
    store: str,
    override: dict[str, str],
    settings: Settings,
    make_corpus: MakeCorpus,
    db: asyncpg.Connection,
    redis: Redis,
    s3_keys: Callable[[str], list[str]],
) -> None:
    from pdfqueue_api.app import create_app

    _, path = await make_corpus(2, seed=41)
    app = create_app(settings.model_copy(update=override))
    since = await db.fetchval("SELECT now()")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=ACME) as c:
            response = await c.post(
                "/v1/batches",
                content=path.read_bytes(),
                headers={"Content-Type": "application/zip"},
            )
    assert response.status_code == 503, response.text
    assert store in response.json()["detail"]
    assert (
        await db.fetchval("SELECT count(*) FROM pdfqueue_batches WHERE created_at >= $1", since)
        == 0
    )
    assert s3_keys("") == []
    assert await redis.keys(f"{settings.queue_name}*") == []


def test_retry_reasons_are_the_taxonomys() -> None:
    assert transient_reasons() == metrics.RETRY_REASONS
    assert "timeout" in metrics.RETRY_REASONS
    assert transient_reason(TimeoutError()) == "timeout"
    assert transient_reason(ValueError()) == "internal_error"


def test_the_outcomes_page_lists_every_retry_reason() -> None:
    page = (ROOT / "docs/user-guide/outcomes.md").read_text()
    found = re.search(
        r"after that the file fails with the last one of these reasons.*?\n\n(.*?)\n", page, re.S
    )
    assert found is not None
    listed = set(re.findall(r"`([a-z_]+)`", found.group(1)))
    in_table = set(re.findall(r"^\| `([a-z_]+)` \| `failed` \|.*\| yes \|$", page, re.M))
    assert listed | in_table == {*transient_reasons(), "worker_lost"}


def _modules(package: object) -> list[str]:
    path = package.__path__  # type: ignore[attr-defined]
    prefix = package.__name__ + "."  # type: ignore[attr-defined]
    return [m.name for m in pkgutil.walk_packages(path, prefix)]


def test_every_exception_the_project_defines_is_a_pdfqueue_error() -> None:
    strays = []
    for package in (pdfqueue, pdfqueue_api, pdfqueue_worker, pdfqueue_operator):
        for name in _modules(package):
            if name.endswith(("__main__", ".demo", ".samples")):
                continue
            module = importlib.import_module(name)
            for value in vars(module).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == name
                    and not issubclass(value, PdfQueueError)
                ):
                    strays.append(f"{name}.{value.__name__}")
    assert strays == []


def test_every_error_knows_its_http_status() -> None:
    from pdfqueue.domain import errors

    statuses = {
        name: cls.http_status
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, PdfQueueError)
    }
    assert statuses["StorageError"] == 503
    assert statuses["DatabaseUnavailable"] == statuses["RedisUnavailable"] == 503
    assert statuses["BatchNotFound"] == 404
    assert statuses["QuotaExceeded"] == 429
    assert statuses["UnsupportedMediaType"] == 415
    assert statuses["PermanentError"] == 400
