"""The spans of the test process, captured through the services' own tracing setup."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pdfqueue.observability.tracing import setup_tracing


def capture_spans() -> InMemorySpanExporter:
    """An in-memory exporter of this process's spans. The tracer provider is set once per
    process: the first caller sets it up as the services do, later ones add their exporter."""
    memory = InMemorySpanExporter()
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):  # another module got there first
        current.add_span_processor(SimpleSpanProcessor(memory))
    else:
        setup_tracing("pdfqueue-test", export=False, exporter=memory)
    return memory
