"""The one typed settings class: every PDFQUEUE_* variable is read here and nowhere else."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ARQ_TIMEOUT_MARGIN_S = 5.0
"""Time a job has, after its own deadline, to give up cleanly before arq cancels it."""
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


class Settings(BaseSettings):
    """Configuration for every pdfqueue process, built once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="PDFQUEUE_", extra="ignore", frozen=True)

    # --- services -----------------------------------------------------------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis holding the arq queue and live batch state. Must be `noeviction` with AOF."""
    redis_strict: bool = False
    """Refuse to start (instead of warning) when Redis is not `noeviction` with AOF on."""
    database_url: str = "postgresql://pdfqueue:pdfqueue@127.0.0.1:5432/pdfqueue"
    """PostgreSQL holding the durable record and the host application's users table."""
    storage_url: str = "file://./.pdfqueue/storage"
    """Where uploads and linked PDFs live: `s3://bucket/prefix` or `file:///path`."""
    s3_endpoint_url: str | None = None
    """S3 endpoint for non-AWS stores (versitygw, MinIO); credentials come from `AWS_*`."""
    s3_path_style: bool = True
    """Address buckets by path (`endpoint/bucket/key`), which every S3-compatible server accepts."""
    s3_create_bucket: bool = True
    """Let `pdfqueue migrate` create the bucket when it does not exist."""
    users_table: str = "users"
    """The host application's table with columns `id`, `email`, `pdf_url`."""

    # --- API ----------------------------------------------------------------------------------
    api_tokens: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """`tenant:token` pairs, comma separated; `tenant:sha256:<hex>` stores only the hash."""
    max_upload_bytes: int = 2 * 1024**3
    """Largest accepted upload; larger bodies get 413 while streaming."""
    upload_part_bytes: int = 8 * 1024**2
    """Chunk size for streaming an upload into storage (S3 multipart part size, >= 5 MiB)."""
    public_url: str | None = None
    """Base URL the API advertises in `status_url`; defaults to the request's own URL."""
    kubernetes_namespace: str | None = None
    """When set, the API also creates a `PdfBatch` object in this namespace for each upload."""

    # --- Kubernetes: operator, worker heartbeat -----------------------------------------------
    kubeconfig: str | None = None
    """Kubeconfig for the API and operator outside a pod; in a pod, its ServiceAccount is used."""
    pod_name: str | None = Field(default=None, validation_alias="HOSTNAME")
    """This pod's name (Kubernetes sets HOSTNAME to it): keys the worker's heartbeat."""
    worker_heartbeat_s: float = 2.0
    """How often a worker publishes its running-job count (TTL 3x) for scale-in ordering."""
    operator_scale_interval_s: float = 1.0
    """How often the operator reads the queue depth and sets the workers' replicas."""
    operator_status_interval_s: float = 2.0
    """How often the operator copies batch progress into PdfBatch `.status`."""
    operator_worker_selector: str = (
        "app.kubernetes.io/component=worker,app.kubernetes.io/part-of=pdfqueue"
    )
    """Label selector of the worker Deployments the operator scales."""
    operator_health_port: int = 8080
    """Port of the operator's liveness endpoint (kopf's `/healthz`)."""

    # --- batches and archives -----------------------------------------------------------------
    batch_ttl_s: int = 3600
    """Live state in Redis expires this long after the batch's last activity."""
    max_members: int = 100_000
    """Most ZIP members one upload may hold (directories included)."""
    max_pdf_bytes: int = 16 * 1024**2
    """Largest uncompressed size of one member: a résumé is well under 1 MiB, 16 MiB leaves
    room for scans. Members inflate in the parsing process, under its memory limit."""
    max_total_uncompressed_bytes: int = 20 * 1024**3
    """Largest sum of uncompressed member sizes in one ZIP."""
    max_compression_ratio: float = 200.0
    """Largest uncompressed/compressed ratio of one member; higher looks like a zip bomb."""

    # --- worker -------------------------------------------------------------------------------
    queue_name: str = "pdfqueue:queue"
    """The arq queue (a Redis sorted set)."""
    worker_max_jobs: int = 4
    """Jobs one worker runs at once; with `pdfs_per_job` this bounds the PDFs in flight
    (64 by default), enough to keep a parser busy while others wait on I/O."""
    pdfs_per_job: int = Field(default=16, ge=1, le=1000)
    """PDFs one `process` job handles: neighbours in the ZIP, read with one ranged GET and
    matched with one query. Each still gets its own outcome, and a retry redoes only the
    PDFs without one."""
    worker_poll_delay_s: float = 0.05
    """How often an idle worker asks Redis for ready jobs (arq's default 0.5 s caps throughput)."""
    extract_processes: int = 0
    """Processes parsing PDFs per worker; 0 means one per CPU."""
    extract_timeout_s: float = 10.0
    """Hard limit for reading one PDF; the parsing process is killed after it. Keep it under
    PDFQUEUE_JOB_TIMEOUT_S - 4 s, the time a job gives parsing, or a PDF at the limit is
    retried until its tries run out before it fails with `timeout`."""
    extract_max_pages: int = 50
    """Pages read per PDF when looking for an email; an email is almost always on page one."""
    extract_memory_bytes: int = 320 * 1024**2
    """Address-space limit of each parsing process, so a decompression bomb fails one file
    (256 MiB still reads ordinary PDFs and inflates a member of `PDFQUEUE_MAX_PDF_BYTES`;
    PDFium aborts its process at the limit, which fails that file as `too_large`)."""
    extract_tasks_per_process: int = 5000
    """Recycle a parsing process after this many PDFs to bound slow leaks (its memory limit
    already bounds a fast one; recycling every 500 cost ~0.8 ms of CPU per PDF)."""
    job_timeout_s: float = 15.0
    """Deadline of one job; past it the job is retried (never lost). arq's own hard limit is
    this plus `ARQ_TIMEOUT_MARGIN_S`, and a SIGKILLed worker's job runs again after that
    plus 10 s: 30 s with the defaults."""
    job_completion_wait_s: int = 30
    """On SIGTERM, how long running jobs may finish. Must exceed arq's hard limit
    (job_timeout_s + 5); a pod's terminationGracePeriodSeconds must exceed this."""
    max_tries: int = 8
    """Tries of one PDF before a transient error becomes its final outcome. With the default
    delays the tries span at least ~45 s, so a database failover or S3 blip fails nothing."""
    retry_base_delay_s: float = 1.0
    """First retry delay; doubles each try up to retry_max_delay_s, half of it jittered."""
    retry_max_delay_s: float = 30.0
    """Ceiling of the retry delay."""
    enqueue_chunk: int = 500
    """Process jobs written to Redis per round trip by ingest."""

    # --- observability ------------------------------------------------------------------------
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

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        tokens: dict[str, str] = {}
        for entry in filter(None, (e.strip() for e in value.split(","))):
            tenant, sep, token = entry.partition(":")
            if not sep or not tenant or not token:
                msg = f"PDFQUEUE_API_TOKENS entry {entry[:12]!r}... is not tenant:token"
                raise ValueError(msg)
            tokens[token] = tenant
        return tokens

    @field_validator("users_table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if not _IDENT.match(value):
            msg = f"PDFQUEUE_USERS_TABLE {value!r} is not a plain [schema.]table name"
            raise ValueError(msg)
        return value

    @field_validator("upload_part_bytes")
    @classmethod
    def _check_part(cls, value: int) -> int:
        if value < 5 * 1024**2:
            msg = "PDFQUEUE_UPLOAD_PART_BYTES must be at least 5 MiB (the S3 multipart minimum)"
            raise ValueError(msg)
        return value

    @property
    def export_traces(self) -> bool:
        """Export spans over OTLP/HTTP? Off unless an OTLP endpoint or exporter is configured."""
        if self.otel_traces_exporter:
            return "otlp" in {e.strip().lower() for e in self.otel_traces_exporter.split(",")}
        return bool(self.otel_exporter_otlp_endpoint)

    @cached_property
    def arq_timeout_s(self) -> float:
        """arq's hard limit per job: a backstop that a job's own deadline should never reach."""
        return self.job_timeout_s + ARQ_TIMEOUT_MARGIN_S

    def check_shutdown_rule(self) -> None:
        """Refuse a completion wait that would cut running jobs off (grace > wait > timeout)."""
        if self.job_completion_wait_s <= self.arq_timeout_s:
            msg = (
                f"PDFQUEUE_JOB_COMPLETION_WAIT_S ({self.job_completion_wait_s}) must exceed "
                f"PDFQUEUE_JOB_TIMEOUT_S + {ARQ_TIMEOUT_MARGIN_S:g} ({self.arq_timeout_s:g})"
            )
            raise ValueError(msg)
