"""Metrics and traces."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field

from pdfqueue.domain.settings.values import entries


class TelemetrySettings(BaseModel):
    """Observability: metrics and traces.

    Each process's `/metrics` and its OpenTelemetry export.
    """

    metrics_port: int = 9100
    """Port of this process's own `/metrics` (worker, operator); 0 turns it off. The API
    serves `/metrics` on its HTTP port instead. Each process has its own endpoint: run several
    workers on one host with different ports."""
    metrics_interval_s: float = 5.0
    """How often the queue-depth and Redis-memory gauges are refreshed."""
    otel_traces_exporter: str | None = Field(default=None, validation_alias="OTEL_TRACES_EXPORTER")
    """Standard OTel variable: `otlp` turns trace export on, `none` keeps it off."""
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        ),
    )
    """Standard OTel variable: setting an endpoint turns trace export on."""

    @property
    def export_traces(self) -> bool:
        """Export spans over OTLP/HTTP? Off unless an OTLP endpoint or exporter is configured."""
        if self.otel_traces_exporter:
            return "otlp" in entries(self.otel_traces_exporter.lower())
        return bool(self.otel_exporter_otlp_endpoint)
