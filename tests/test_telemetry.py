"""One trace per upload, linked per-PDF traces, context on every log line, no email anywhere."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY

from pdfqueue.observability.logging import log_handler, redact
from pdfqueue.observability.tracing import (
    BATCH_ID,
    FILE_EVENT,
    FILES,
    MEMBER_INDEX,
    record_error,
)
from pdfqueue_dev.corpora.samples import DECOYS, Corpus
from tests.support.helpers import MakeCorpus, RunWorker, upload
from tests.support.spans import capture_spans

STAGES = {"read", "extract", "match", "store", "claim", "record"}


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """Spans of this process, through the services' own tracing setup."""
    return capture_spans()


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """Every log line of the test as the services write it (JSON, context filter on)."""
    buffer = io.StringIO()
    handler = log_handler(json_lines=True, stream=buffer)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield buffer
    root.removeHandler(handler)
    root.setLevel(level)


def one(spans: list[ReadableSpan], name: str, kind: SpanKind) -> ReadableSpan:
    found = [s for s in spans if s.name == name and s.kind is kind]
    assert len(found) == 1, [(s.name, s.kind) for s in spans]
    return found[0]


def emails_of(corpus: Corpus) -> set[str]:
    found = {u.email for u in corpus.users} | {f.email for f in corpus.files if f.email}
    return {e.lower() for e in found | set(DECOYS)}


def span_text(span: ReadableSpan) -> str:
    """Everything a span exports that could hold text: name, attributes, events, links, status."""
    parts: list[Any] = [span.name, span.status.description, dict(span.attributes or {})]
    parts += [(e.name, dict(e.attributes or {})) for e in span.events]
    parts += [dict(link.attributes or {}) for link in span.links]
    parts.append(dict(span.resource.attributes))
    return json.dumps(parts, default=str).lower()


def documents_by_outcome() -> dict[str, float]:
    totals: dict[str, float] = {}
    for metric in REGISTRY.collect():
        if metric.name == "pdfqueue_documents":
            for sample in metric.samples:
                if sample.name == "pdfqueue_documents_total":
                    outcome = sample.labels["outcome"]
                    totals[outcome] = totals.get(outcome, 0) + sample.value
    return totals


@pytest.mark.settings(pdfs_per_job=5)
async def test_upload_is_one_trace_and_each_pdf_a_linked_trace(
    api: httpx.AsyncClient,
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
    spans: InMemorySpanExporter,
    json_logs: io.StringIO,
) -> None:
    corpus, path = await make_corpus(16, seed=11)
    before = documents_by_outcome()
    batch_id = await upload(api, path)
    await run_worker()
    assert (await api.get(f"/v1/batches/{batch_id}")).json()["status"] == "COMPLETED"
    finished = list(spans.get_finished_spans())

    # API request (server) -> enqueue ingest (producer) -> ingest (consumer): one trace.
    server = one(finished, "POST /v1/batches", SpanKind.SERVER)
    assert server.attributes is not None
    assert server.attributes[BATCH_ID] == batch_id
    assert server.attributes["http.response.status_code"] == 202
    upload_trace = server.context.trace_id
    producer = one(finished, "enqueue ingest", SpanKind.PRODUCER)
    assert producer.context.trace_id == upload_trace
    assert producer.parent is not None
    assert producer.parent.span_id == server.context.span_id
    ingest = one(finished, "ingest", SpanKind.CONSUMER)
    assert ingest.context.trace_id == upload_trace
    assert ingest.parent is not None
    assert ingest.parent.span_id == producer.context.span_id
    assert ingest.parent.is_remote  # it came through the job's `trace` kwarg, via Redis
    assert ingest.attributes is not None
    assert ingest.attributes[BATCH_ID] == batch_id

    # ingest fans out under PRODUCER spans of its own trace...
    fanout = [s for s in finished if s.name == "enqueue process" and s.kind is SpanKind.PRODUCER]
    assert fanout
    for s in fanout:
        assert s.parent is not None
        assert s.parent.span_id == ingest.context.span_id
    fanout_ids = {s.context.span_id for s in fanout}

    # ...and each process job (5 PDFs at most) is a trace of its own, linked back to the
    # fan-out, with an event per PDF carrying that file's outcome.
    processes = [s for s in finished if s.name == "process" and s.kind is SpanKind.CONSUMER]
    assert len(processes) == 4  # 16 PDFs
    children: dict[int, list[ReadableSpan]] = {}
    for s in finished:
        if s.parent is not None:
            children.setdefault(s.parent.span_id, []).append(s)
    outcomes: dict[int, str] = {}
    for p in processes:
        assert p.attributes is not None
        assert p.attributes[BATCH_ID] == batch_id
        assert p.parent is None
        assert p.context.trace_id != upload_trace
        assert len(p.links) == 1
        assert p.links[0].context.trace_id == upload_trace
        assert p.links[0].context.span_id in fanout_ids
        files = [e.attributes for e in p.events if e.name == FILE_EVENT and e.attributes]
        assert len(files) == p.attributes[FILES]
        assert p.attributes[MEMBER_INDEX] == min(int(str(f[MEMBER_INDEX])) for f in files)
        outcomes.update({int(str(f[MEMBER_INDEX])): str(f["pdfqueue.outcome"]) for f in files})
        kids = children.get(p.context.span_id, [])
        assert {k.context.trace_id for k in kids} <= {p.context.trace_id}
        names = {k.name for k in kids}
        assert names <= STAGES
        assert {"read", "record"} <= names
        if any(f["pdfqueue.outcome"] == "linked" for f in files):
            assert {"extract", "match", "store", "claim"} <= names
            extract = next(k for k in kids if k.name == "extract")
            assert extract.attributes is not None
            assert int(str(extract.attributes["pdfqueue.pages"])) >= 1
            assert int(str(extract.attributes["pdfqueue.email_candidates"])) >= 1
    assert len(outcomes) == len(corpus.files)
    expected = sorted(f.expect.value for f in corpus.files)
    assert sorted(outcomes.values()) == expected
    assert "linked" in expected

    # Logs: context without call sites passing it; trace ids tie them to the traces above.
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    about_batch = [line for line in lines if line.get("batch_id") == batch_id]
    ours = [line for line in about_batch if line["logger"].startswith("pdfqueue")]
    assert ours
    assert all("trace_id" in line for line in ours)
    # arq's own lines about our jobs (start, result) get the ids from the job id they name.
    arq_lines = [
        line for line in lines if line["logger"] == "arq.worker" and batch_id in line["msg"]
    ]
    assert len(arq_lines) >= 2 * (len(processes) + 1)
    assert all(line.get("batch_id") == batch_id and "job_id" in line for line in arq_lines)
    created = next(line for line in about_batch if line["msg"] == "batch created")
    assert created["trace_id"] == trace.format_trace_id(upload_trace)
    ingested = next(line for line in about_batch if line["msg"].startswith("ingested"))
    assert ingested["job_id"] == f"ingest:{batch_id}"
    assert ingested["trace_id"] == trace.format_trace_id(upload_trace)
    completed = next(line for line in about_batch if line["msg"] == "batch completed")
    assert completed["job_id"].startswith(f"process:{batch_id}:")
    process_traces = {trace.format_trace_id(p.context.trace_id) for p in processes}
    assert completed["trace_id"] in process_traces

    # No email of the corpus in any span or log line.
    emails = emails_of(corpus)
    exported = [span_text(s) for s in finished] + [json_logs.getvalue().lower()]
    leaks = {e for e in emails for text in exported if e in text}
    assert not leaks

    # Each file counted once in the metrics, by outcome.
    after = documents_by_outcome()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert {k: v for k, v in delta.items() if v} == {k: v for k, v in corpus.counts().items() if v}


async def test_a_callers_traceparent_is_continued(
    api: httpx.AsyncClient, spans: InMemorySpanExporter
) -> None:
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = await api.get(
        "/v1/batches/0123456789abcdef0123456789abcdef",
        headers={"traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01"},
    )
    assert response.status_code == 404
    server = one(list(spans.get_finished_spans()), "GET /v1/batches/{batch_id}", SpanKind.SERVER)
    assert trace.format_trace_id(server.context.trace_id) == caller_trace
    assert server.attributes is not None
    assert server.attributes["http.route"] == "/v1/batches/{batch_id}"
    assert server.attributes[BATCH_ID] == "0123456789abcdef0123456789abcdef"


def test_errors_are_recorded_without_addresses(spans: InMemorySpanExporter) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("failing") as span:
        record_error(span, ValueError("no user for Ada.Lovelace.7@Example.com in users"))
    (finished,) = spans.get_finished_spans()
    assert "lovelace" not in span_text(finished)
    assert "<email>" in span_text(finished)
    assert redact("mail x.y+z@sub.example.org, then") == "mail <email>, then"


EXPORT_ONE_SPAN = """
from pdfqueue.domain.settings import Settings
from pdfqueue.observability.tracing import TRACER, setup_tracing
provider = setup_tracing("pdfqueue-test", export=Settings().export_traces)
TRACER.start_span("one").end()
provider.shutdown()  # flushes the batch processor
"""


@pytest.mark.parametrize(
    ("variables", "exported"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}"}, True),
        (
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "{url}/v1/traces",
            },
            True,
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "{url}", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_otlp_export_follows_the_standard_variables(
    variables: dict[str, str], exported: bool
) -> None:
    received: list[str] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            received.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({k: v.format(url=url) for k, v in variables.items()})
    try:
        result = subprocess.run(
            [sys.executable, "-c", EXPORT_ONE_SPAN],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    assert received == (["/v1/traces"] if exported else [])
