"""Completion webhooks against a real local receiver: one signed delivery per completion,
retried while the receiver is down, and never to an address pdfqueue must not call."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client import REGISTRY

from pdfqueue.domain.errors import DatabaseUnavailable
from pdfqueue.domain.models import COUNTERS
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue_dev.processes import free_port
from pdfqueue_worker.tasks import webhook as webhook_task
from tests.support.helpers import MakeCorpus, RunWorker, upload
from tests.support.webhooks import SECRET, Receiver, deliveries, upload_with

HOOKS = pytest.mark.settings(
    webhook_allow_http_loopback=True,
    webhook_secrets={"acme": SECRET},
    retry_base_delay_s=0.2,
    retry_max_delay_s=1.0,
)


def verify(secret: str, header: str, body: bytes, tolerance_s: int = 300) -> bool:
    """The verification snippet of docs/user-guide/webhooks.md, verbatim."""
    fields = dict(part.split("=", 1) for part in header.split(","))
    timestamp = int(fields["t"])
    expected = hmac.new(
        secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256
    ).hexdigest()
    fresh = abs(time.time() - timestamp) <= tolerance_s
    return fresh and hmac.compare_digest(expected, fields["v1"])


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver(free_port())
    yield r
    await r.stop()


class Attempts:
    """pdfqueue_webhook_deliveries_total by result, counted from when this was made (the worker
    runs in the test's process and serves this registry)."""

    def __init__(self) -> None:
        metrics.register("worker")
        self.start = self.now()

    @staticmethod
    def now() -> dict[str, float]:
        return {
            result: REGISTRY.get_sample_value(
                "pdfqueue_webhook_deliveries_total", {"result": result}
            )
            or 0.0
            for result in metrics.WEBHOOK_RESULTS
        }

    def since(self) -> dict[str, float]:
        now = self.now()
        return {r: now[r] - self.start[r] for r in now if now[r] != self.start[r]}


@HOOKS
async def test_each_completion_is_delivered_once_signed_with_the_final_counts(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await receiver.start()
    attempts = Attempts()
    corpus, path = await make_corpus(20, seed=51)
    response = await upload_with(api, path, receiver.url)
    assert response.status_code == 202, response.text
    batch_id = response.json()["batch_id"]
    await run_worker()
    await run_worker()  # a second worker run delivers nothing twice

    assert len(receiver.got) == 1
    path_, headers, body = receiver.got[0]
    assert path_ == "/hooks/pdf"
    assert verify(SECRET, headers["pdfqueue-signature"], body)
    assert not verify("another-secret", headers["pdfqueue-signature"], body)
    assert headers["pdfqueue-event"] == "batch.completed"
    assert headers["pdfqueue-delivery"] == f"{batch_id}:0"
    sent = json.loads(body)
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert sent["event"] == "batch.completed"
    for name in ("batch_id", "status", "total_files", "processed", *COUNTERS):
        assert sent[name] == status[name], name
    assert sum(sent[c] for c in COUNTERS) == sent["processed"]
    assert await deliveries(db, batch_id) == [
        {"round": 0, "attempt": 1, "url": receiver.url, "status_code": 200, "error": None}
    ]
    assert SECRET not in caplog.text
    assert attempts.since() == {"delivered": 1}

    # a retry's completion is a new event, delivered once too
    if corpus.counts()["failed"]:
        retried = await api.post(f"/v1/batches/{batch_id}/retry", params={"all_failed": "true"})
        assert retried.status_code == 202
        await run_worker()
        assert len(receiver.got) == 2
        assert receiver.got[1][1]["pdfqueue-delivery"] == f"{batch_id}:1"
        assert json.loads(receiver.got[1][2])["retries"] == 1
        assert attempts.since() == {"delivered": 2}


@HOOKS
async def test_a_batch_that_fails_as_a_whole_is_delivered_as_batch_failed_with_its_reason(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
    tmp_path: Path,
) -> None:
    await receiver.start()
    path = tmp_path / "no-pdf.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("Ann Smith CV.docx", b"not a pdf")
    response = await upload_with(api, path, receiver.url)
    assert response.status_code == 202, response.text
    batch_id = response.json()["batch_id"]
    await run_worker()
    await run_worker()  # once, as for a completion

    assert len(receiver.got) == 1
    _, headers, body = receiver.got[0]
    assert verify(SECRET, headers["pdfqueue-signature"], body)
    assert headers["pdfqueue-event"] == "batch.failed"
    assert headers["pdfqueue-delivery"] == f"{batch_id}:0"
    sent = json.loads(body)
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert (sent["event"], sent["status"], sent["reason"]) == (
        "batch.failed",
        "FAILED",
        "no_pdf_members",
    )
    assert sent["error"] == status["error"]
    assert (sent["total_files"], sent["ignored"]) == (0, 1)
    assert b"Ann Smith" not in body  # the names are the report's, not the event's
    assert [d["status_code"] for d in await deliveries(db, batch_id)] == [200]


@HOOKS
@pytest.mark.timeout(180)
async def test_a_receiver_down_for_20_s_still_gets_the_delivery(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
) -> None:
    counted = Attempts()
    _, path = await make_corpus(6, seed=52)
    response = await upload_with(api, path, receiver.url)  # nobody listens there yet
    assert response.status_code == 202, response.text
    batch_id = response.json()["batch_id"]
    worker = asyncio.create_task(run_worker())
    while not await deliveries(db, batch_id):  # noqa: ASYNC110 (rows written by the worker)
        await asyncio.sleep(0.1)
    down_since = time.monotonic()
    await asyncio.sleep(20)
    await receiver.start()
    await worker
    assert len(receiver.got) == 1
    assert verify(SECRET, receiver.got[0][1]["pdfqueue-signature"], receiver.got[0][2])
    attempts = await deliveries(db, batch_id)
    assert attempts[-1]["status_code"] == 200
    failed = attempts[:-1]
    assert len(failed) >= 2
    assert {a["error"] for a in failed} == {"ConnectError"}
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    assert time.monotonic() - down_since >= 20
    assert counted.since() == {"retried": len(failed), "delivered": 1}


@pytest.mark.settings(
    webhook_allow_http_loopback=True,
    webhook_secrets={"acme": SECRET},
    webhook_deadline_s=2.0,
    retry_base_delay_s=0.2,
    retry_max_delay_s=0.5,
)
async def test_a_delivery_past_its_deadline_is_given_up_and_counted(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
) -> None:
    """The receiver never answers: tries until webhook_deadline_s, then the last is given up."""
    counted = Attempts()
    _, path = await make_corpus(3, seed=57)
    response = await upload_with(api, path, receiver.url)
    assert response.status_code == 202, response.text
    batch_id = response.json()["batch_id"]
    await run_worker()
    attempts = await deliveries(db, batch_id)
    assert len(attempts) >= 2
    assert {a["error"] for a in attempts} == {"ConnectError"}
    assert counted.since() == {"retried": len(attempts) - 1, "gave_up": 1}


@pytest.mark.settings(webhook_secrets={"acme": SECRET})
@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "only https"),
        ("https://169.254.169.254/latest/meta-data/", "non-public address (169.254.169.254)"),
        ("https://[fd00:ec2::254]/", "non-public address"),
        ("https://127.0.0.1/hook", "non-public address (127.0.0.1)"),
        ("http://127.0.0.1:9/hook", "only https"),
        ("https://localhost/hook", "non-public address"),
        ("https://10.1.2.3/hook", "non-public address (10.1.2.3)"),
        ("https://[::ffff:10.0.0.1]/hook", "non-public address (10.0.0.1)"),
        ("https://192.168.0.10/hook", "non-public address"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("ftp://example.com/hook", "only https"),
        ("https://no-such-host.invalid/hook", "does not resolve"),
        ("https://example.com/\nX: y", "not a URL"),
        ("https://example.com/" + "a" * 2100, "not a URL"),  # over 2,048 characters
    ],
)
async def test_unsafe_callbacks_are_refused_at_upload_and_nothing_is_stored(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    db: asyncpg.Connection,
    s3_keys: Any,
    url: str,
    why: str,
) -> None:
    _, path = await make_corpus(2, seed=53)
    before = await db.fetchval("SELECT count(*) FROM pdfqueue_callbacks")
    response = await upload_with(api, path, url)
    assert response.status_code == 422, response.text
    assert why in response.json()["detail"]
    assert await db.fetchval("SELECT count(*) FROM pdfqueue_callbacks") == before
    assert s3_keys() == []


async def test_a_tenant_without_a_secret_cannot_name_a_callback(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, s3_keys: Any
) -> None:
    _, path = await make_corpus(2, seed=54)
    response = await upload_with(api, path, "https://example.com/hook")
    assert response.status_code == 422
    assert "no webhook secret" in response.json()["detail"]
    assert s3_keys() == []


@pytest.mark.settings(
    webhook_secrets={"acme": SECRET}, webhook_urls={"acme": "https://127.0.0.1:9/hook"}
)
async def test_an_unsafe_tenant_webhook_is_refused_at_delivery(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, db: asyncpg.Connection
) -> None:
    counted = Attempts()
    _, path = await make_corpus(3, seed=55)
    batch_id = await upload(api, path)
    await run_worker()
    assert counted.since() == {"refused": 1}
    assert await deliveries(db, batch_id) == [
        {
            "round": 0,
            "attempt": 1,
            "url": "https://127.0.0.1:9/hook",
            "status_code": None,
            "error": "it resolves to a non-public address (127.0.0.1)",
        }
    ]


@HOOKS
async def test_a_redirect_is_recorded_and_never_followed(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
) -> None:
    receiver.answer = 302
    receiver.headers = {"location": f"http://127.0.0.1:{receiver.port}/elsewhere"}
    await receiver.start()
    counted = Attempts()
    _, path = await make_corpus(3, seed=56)
    response = await upload_with(api, path, receiver.url)
    batch_id = response.json()["batch_id"]
    await run_worker()
    assert [p for p, _, _ in receiver.got] == ["/hooks/pdf"]  # /elsewhere never asked
    attempts = await deliveries(db, batch_id)
    assert [(a["status_code"], a["error"]) for a in attempts] == [(302, None)]
    assert counted.since() == {"refused": 1}


@pytest.mark.settings(
    webhook_secrets={"acme": SECRET},
    webhook_urls={"acme": "https://no-such-host.invalid/hook"},
    webhook_deadline_s=2.0,
    retry_base_delay_s=0.2,
    retry_max_delay_s=0.5,
)
async def test_a_host_that_does_not_resolve_at_delivery_is_tried_until_the_deadline(
    api: httpx.AsyncClient, make_corpus: MakeCorpus, run_worker: RunWorker, db: asyncpg.Connection
) -> None:
    """A lookup that fails may be a name server down for a while, not an unsafe address:
    each attempt is recorded with the reason, then the last is given up at the deadline."""
    counted = Attempts()
    _, path = await make_corpus(3, seed=58)
    batch_id = await upload(api, path)
    await run_worker()
    attempts = await deliveries(db, batch_id)
    assert len(attempts) >= 2
    assert {a["error"] for a in attempts} == {"its host does not resolve"}
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    assert counted.since() == {"retried": len(attempts) - 1, "gave_up": 1}


def _failing_once(real: Any, error: Exception) -> Any:
    """`real`, except that its first call raises `error`."""
    calls = []

    async def once(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise error
        return await real(*args, **kwargs)

    return once


@HOOKS
async def test_an_unexpected_error_of_an_attempt_is_recorded_and_tried_again(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error of no kind the HTTP client is known to raise (a bug of its, or of ours) does
    not end the delivery unrecorded: the attempt is a row with the error, the next one runs."""
    broken = RuntimeError("the HTTP client's connection pool is in a state it cannot handle")
    monkeypatch.setattr(webhook_task, "post", _failing_once(webhook_task.post, broken))
    await receiver.start()
    counted = Attempts()
    _, path = await make_corpus(3, seed=59)
    response = await upload_with(api, path, receiver.url)
    batch_id = response.json()["batch_id"]
    await run_worker()
    attempts = await deliveries(db, batch_id)
    assert [(a["status_code"], a["error"]) for a in attempts] == [
        (None, "RuntimeError"),
        (200, None),
    ]
    assert len(receiver.got) == 1
    assert counted.since() == {"retried": 1, "delivered": 1}


@HOOKS
async def test_a_delivery_whose_batch_cannot_be_read_runs_again(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    receiver: Receiver,
    db: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL fails as the delivery looks up its callback: nothing was sent or recorded,
    so the delivery is queued again with the backoff instead of failing for good."""
    down = DatabaseUnavailable("connection refused")
    monkeypatch.setattr(webhook_task, "callback_of", _failing_once(webhook_task.callback_of, down))
    await receiver.start()
    counted = Attempts()
    _, path = await make_corpus(3, seed=60)
    response = await upload_with(api, path, receiver.url)
    batch_id = response.json()["batch_id"]
    await run_worker()
    attempts = await deliveries(db, batch_id)
    assert [(a["attempt"], a["status_code"]) for a in attempts] == [(2, 200)]
    assert len(receiver.got) == 1
    assert counted.since() == {"retried": 1, "delivered": 1}


def test_settings_keep_the_secret_out_of_reprs() -> None:
    configured = Settings(webhook_secrets={"acme": SECRET})
    assert SECRET not in repr(configured)
    assert SECRET not in str(configured.webhook_secrets)
