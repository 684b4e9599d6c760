"""OpenTelemetry tracing: the provider, and the W3C context a job carries from producer to consumer.

One upload is one trace: the API's server span, a PRODUCER span for enqueueing `ingest`, and
the `ingest` CONSUMER span, parented through the `traceparent` in the job's `trace` kwarg.
A `process` job starts a trace of its own and *links* to the span that enqueued it (a PRODUCER
span under `ingest`): a 50,000-PDF batch would otherwise be one trace too big to load or read.

The SDK provider is installed in every service process, so trace ids exist for log lines and
job payloads even when nothing is exported; export is OTLP/HTTP and only when the standard
variables ask for it (see `Settings.export_traces`). Sampling, endpoint, headers and resource
come from the standard `OTEL_*` variables, read by the SDK itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from pdfqueue.observability.logging import redact

TRACER = trace.get_tracer("pdfqueue")
BATCH_ID = "pdfqueue.batch_id"
MEMBER_INDEX = "pdfqueue.member_index"
"""On a process job: the index of its first ZIP member; on a file event: that file's."""
FILES = "pdfqueue.files"
"""How many PDFs a process job handles."""
FILE_EVENT = "pdfqueue.file"

SAFE_QUERY = frozenset({"limit", "offset", "sort", "outcome", "format", "erase", "cursor"})
"""Query parameters whose values a span keeps: bounded, and never a person's. Any other value
(a report's `search` is often a candidate's name) becomes REDACTED in `url.query`."""

Carrier = dict[str, str]
"""W3C trace context as a JSON-able dict (`traceparent`, maybe `tracestate`)."""


def setup_tracing(
    service_name: str, *, export: bool, exporter: SpanExporter | None = None
) -> TracerProvider:
    """Install the SDK provider for this process; OTLP export only if `export`.

    `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` win over `service_name`. `exporter` is
    for tests (an in-memory exporter), attached with a synchronous processor.
    """
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service_name}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(QueryRedactor())  # first: before any exporter sees a span
    if export:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


class QueryRedactor(SpanProcessor):
    """Scrubs the server span's `url.query` as it starts: FastAPI's span records the query
    string, and a report's search term is personal data."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        query = (span.attributes or {}).get("url.query") if isinstance(span, ReadableSpan) else None
        if isinstance(query, str):
            span.set_attribute("url.query", redact_query(query))


def redact_query(query: str) -> str:
    """`query` with each value but those of SAFE_QUERY replaced by REDACTED."""
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, v if k in SAFE_QUERY else "REDACTED") for k, v in pairs])


def record_error(span: Span, exc: BaseException) -> None:
    """Mark `span` failed with the exception's type and a redacted message.

    Used instead of the SDK's `record_exception`, whose message and stack trace could carry
    an email address taken from a PDF.
    """
    message = redact(str(exc))[:500]
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {message}"))
    span.add_event(
        "exception",
        {"exception.type": f"{type(exc).__module__}.{type(exc).__qualname__}",
         "exception.message": message},
    )  # fmt: skip


def annotate(**attributes: str | int | None) -> None:
    """Set `pdfqueue.<name>` attributes on the current span (None values are skipped)."""
    span = trace.get_current_span()
    for name, value in attributes.items():
        if value is not None:
            span.set_attribute(f"pdfqueue.{name}", value)


def file_event(index: int, outcome: str, reason: str | None) -> None:
    """One file's outcome, as an event on the current (process job) span."""
    attributes: dict[str, str | int] = {MEMBER_INDEX: index, "pdfqueue.outcome": outcome}
    if reason is not None:
        attributes["pdfqueue.reason"] = reason
    trace.get_current_span().add_event(FILE_EVENT, attributes)


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Span]:
    """An INTERNAL child span; an exception marks it failed (redacted) and propagates."""
    with TRACER.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            record_error(current, exc)
            raise


@contextmanager
def producer_span(
    function: str, queue_name: str, count: int, batch_id: str | None
) -> Iterator[Carrier]:
    """A PRODUCER span around enqueueing `count` jobs; yields the carrier the jobs take along."""
    attributes: dict[str, Any] = {
        "messaging.system": "arq",
        "messaging.operation.type": "send",
        "messaging.destination.name": queue_name,
        "messaging.batch.message_count": count,
    }
    if batch_id:
        attributes[BATCH_ID] = batch_id
    with TRACER.start_as_current_span(
        f"enqueue {function}", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: Carrier = {}
        propagate.inject(carrier)
        yield carrier


@contextmanager
def consumer_span(
    function: str,
    job_id: str,
    carrier: Mapping[str, str] | None,
    *,
    link: bool,
    attributes: Mapping[str, Any],
) -> Iterator[Span]:
    """The CONSUMER span of one job try: child of the producer, or a new trace linked to it."""
    producer = propagate.extract(dict(carrier or {}), context=Context())
    links: list[Link] = []
    parent = producer
    if link:
        producer_span_context = trace.get_current_span(producer).get_span_context()
        if producer_span_context.is_valid:
            links.append(Link(producer_span_context))
        parent = Context()  # a root: the job's own trace
    with TRACER.start_as_current_span(
        function,
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "arq",
            "messaging.operation.type": "process",
            "messaging.message.id": job_id,
            **attributes,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        yield current
