"""The one typed settings class: every PDFQUEUE_* variable is read here and nowhere else.

`Settings` is composed of one model per concern, each in a module of this package (stores,
users, retention, auth, api, limits, kubernetes, worker, extraction, webhooks, dispatch,
telemetry): the variables keep their flat `PDFQUEUE_*` names, and code that needs one
concern only may ask for its model (`def open(stores: StoreSettings)`), which every `Settings` is.
The settings reference (docs/operations/settings.md) is generated from these models, one
section each, in the order of `CONCERNS`.
"""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_settings import BaseSettings, SettingsConfigDict

from pdfqueue.domain.settings.api import ApiSettings, HttpSettings
from pdfqueue.domain.settings.auth import AuthSettings
from pdfqueue.domain.settings.dispatch import DispatchSettings
from pdfqueue.domain.settings.extraction import ExtractionSettings
from pdfqueue.domain.settings.kubernetes import (
    LEASE_JITTER,
    LEASE_STOP_MARGIN_S,
    KubernetesSettings,
)
from pdfqueue.domain.settings.limits import (
    API_POOL_CONNECTIONS,
    ArchiveSettings,
    Quota,
    QuotaSettings,
    ReadSettings,
    TenantQuota,
)
from pdfqueue.domain.settings.retention import RetentionSettings
from pdfqueue.domain.settings.stores import StoreSettings
from pdfqueue.domain.settings.telemetry import TelemetrySettings
from pdfqueue.domain.settings.users import UsersSettings
from pdfqueue.domain.settings.webhooks import WebhookSettings
from pdfqueue.domain.settings.worker import ARQ_TIMEOUT_MARGIN_S, JOBS_PER_PARSER, WorkerSettings


class Settings(
    BaseSettings,
    StoreSettings,
    UsersSettings,
    RetentionSettings,
    AuthSettings,
    ApiSettings,
    HttpSettings,
    QuotaSettings,
    ReadSettings,
    KubernetesSettings,
    ArchiveSettings,
    WorkerSettings,
    ExtractionSettings,
    WebhookSettings,
    DispatchSettings,
    TelemetrySettings,
):
    """Configuration for every pdfqueue process, built once at start and passed down."""

    # Validation errors never echo a value: PDFQUEUE_API_TOKENS holds every tenant's secret and
    # PDFQUEUE_DATABASE_URL a password, and these messages end up in logs.
    model_config = SettingsConfigDict(
        env_prefix="PDFQUEUE_", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    @property
    def max_jobs(self) -> int:
        """Jobs this worker runs at once: `worker_max_jobs`, or JOBS_PER_PARSER per parsing
        process."""
        return self.worker_max_jobs or JOBS_PER_PARSER * self.parsing_processes


CONCERNS: tuple[type[BaseModel], ...] = tuple(
    base for base in Settings.__bases__ if base is not BaseSettings
)
"""Settings' parts, in the order the reference lists them (the order of its bases)."""


__all__ = [
    "API_POOL_CONNECTIONS",
    "ARQ_TIMEOUT_MARGIN_S",
    "CONCERNS",
    "JOBS_PER_PARSER",
    "LEASE_JITTER",
    "LEASE_STOP_MARGIN_S",
    "ApiSettings",
    "ArchiveSettings",
    "AuthSettings",
    "DispatchSettings",
    "ExtractionSettings",
    "HttpSettings",
    "KubernetesSettings",
    "Quota",
    "QuotaSettings",
    "ReadSettings",
    "RetentionSettings",
    "Settings",
    "StoreSettings",
    "TelemetrySettings",
    "TenantQuota",
    "UsersSettings",
    "WebhookSettings",
    "WorkerSettings",
]
