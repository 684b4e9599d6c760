"""The one typed settings class: every PDFQUEUE_* variable is read here and nowhere else."""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from pdfqueue.domain.errors import ConfigurationError
from pdfqueue.domain.placeholders import PLACEHOLDER_DOMAINS
from pdfqueue.domain.tenants import parse_api_tokens, valid_tenant

ARQ_TIMEOUT_MARGIN_S = 5.0
"""Time a job has, after its own deadline, to give up cleanly before arq cancels it."""
LEASE_JITTER = 0.1
"""The operator's Lease polls wait retry x (1 + up to this), so that standbys spread out."""
LEASE_STOP_MARGIN_S = 2.0
"""Time a leader has between its renew deadline and its lease's end to stop acting."""
JOBS_PER_PARSER = 4
"""Jobs a worker runs at once per parsing process, unless PDFQUEUE_WORKER_MAX_JOBS says:
enough that one job's parsing overlaps the others' reads, queries and PUTs."""
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


def _entries(value: str) -> list[str]:
    """The entries of a comma-separated variable, stripped, empty ones left out."""
    return [entry for entry in (e.strip() for e in value.split(",")) if entry]


_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
API_POOL_CONNECTIONS = 10
"""PostgreSQL connections of one API process; one tenant's reads hold fewer
(`quota_concurrent_reads`)."""


class Quota(BaseModel):
    """One tenant's limits on uploads and retries; 0 means no limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uploads_per_minute: int = Field(ge=0)
    bytes_per_day: int = Field(ge=0)
    concurrent_batches: int = Field(ge=0)
    retries_per_hour: int = Field(ge=0)


class TenantQuota(BaseModel):
    """An entry of PDFQUEUE_TENANT_QUOTAS: the quotas it names replace the defaults."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uploads_per_minute: int | None = Field(default=None, ge=0)
    bytes_per_day: int | None = Field(default=None, ge=0)
    concurrent_batches: int | None = Field(default=None, ge=0)
    retries_per_hour: int | None = Field(default=None, ge=0)


def _with_password(service: str, url: str, password: object) -> str:
    """`url` with `password` in its user part; never echoes either (both are secrets)."""
    name = f"PDFQUEUE_{service.upper()}"
    secret = password.get_secret_value() if isinstance(password, SecretStr) else str(password)
    if not _URL_SAFE.fullmatch(secret):
        msg = f"{name}_PASSWORD may hold only A-Z a-z 0-9 - . _ ~ (it goes into a URL as it is)"
        raise ValueError(msg)
    parts = urlsplit(url)
    if parts.password is not None:
        msg = f"{name}_URL carries a password and {name}_PASSWORD is set: choose one"
        raise ValueError(msg)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{secret}@{host}"))


class Settings(BaseSettings):
    """Configuration for every pdfqueue process, built once at start and passed down."""

    # Validation errors never echo a value: PDFQUEUE_API_TOKENS holds every tenant's secret and
    # PDFQUEUE_DATABASE_URL a password, and these messages end up in logs.
    model_config = SettingsConfigDict(
        env_prefix="PDFQUEUE_", extra="ignore", frozen=True, hide_input_in_errors=True
    )

    # --- services -----------------------------------------------------------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis holding the arq queue and live batch state. Must be `noeviction` with AOF."""
    redis_strict: bool = False
    """Refuse to start (instead of warning) when Redis is not `noeviction` with AOF on."""
    database_url: str = "postgresql://pdfqueue:pdfqueue@127.0.0.1:5432/pdfqueue"
    """PostgreSQL holding the durable record and the host application's users table."""
    redis_password: SecretStr | None = None
    """Password put into a `redis_url` that carries none (e.g. from a Kubernetes Secret, while
    the URL sits in a ConfigMap). URL-safe characters only: `A-Z a-z 0-9 - . _ ~`."""
    database_password: SecretStr | None = None
    """Password put into a `database_url` that carries none, like `redis_password`."""
    storage_url: str = "file://./.pdfqueue/storage"
    """Where uploads and linked PDFs live: `s3://bucket/prefix` or `file:///path`."""
    s3_endpoint_url: str | None = None
    """S3 endpoint for non-AWS stores (versitygw, MinIO); credentials come from `AWS_*`."""
    s3_path_style: bool = True
    """Address buckets by path (`endpoint/bucket/key`), which every S3-compatible server accepts."""
    s3_create_bucket: bool = True
    """Let `pdfqueue migrate` create the bucket when it does not exist."""
    uploads_expire_days: int = Field(default=7, ge=0)
    """Uploaded ZIPs (`uploads/`) expire this many days after upload, through an S3 lifecycle
    rule that `pdfqueue migrate` sets (0: no rule). A retry needs the ZIP, so keep it above the
    time a batch may wait for one. Stores without lifecycle support get a warning instead."""
    retention_days: int = Field(default=30, ge=0, le=36500)
    """A batch that ended this many days ago is purged: its per-file rows (file names are
    often people's names), its batch row, webhook records and ZIP; the PDFs it linked and the
    links stay. 0 keeps batches for ever."""
    tenant_retention_days: dict[str, Annotated[int, Field(ge=0, le=36500)]] = Field(
        default_factory=dict
    )
    """Per-tenant retention in days as JSON, e.g. `{"acme": 7, "archive": 0}`, over
    `retention_days`."""
    audit_retention_days: int = Field(default=400, ge=0, le=36500)
    """How long the audit trail of purges and erasures is kept (0: for ever); longer than the
    batches it describes, so that a removal can be shown after the fact."""
    users_table: str = "users"
    """The host application's table with columns `id`, `email`, `pdf_url`."""
    users_tenant_column: str | None = None
    """Text column of the users table naming each user's tenant. When set, a batch matches
    and links only users whose column equals the batch's tenant (taken from the batch's row);
    unset, every tenant matches against every user."""
    trusted_tenants: Annotated[frozenset[str], NoDecode] = frozenset()
    """Tenants, comma separated, whose per-file report shows `user_id` and `object_key`;
    for every other tenant both are null (they name users of the host application)."""

    # --- API ----------------------------------------------------------------------------------
    api_tokens: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """`tenant:token` pairs, comma separated; `tenant:sha256:<hex>` stores only the hash. A plain
    token has 32 to 1024 visible ASCII characters, a hash is 64 lowercase hex digits, and no
    token may belong to two tenants. Errors name the entry by position, never its text."""
    api_tokens_file: str | None = None
    """A file holding what PDFQUEUE_API_TOKENS would (a mounted Secret, say), so the tokens
    stay out of the environment that child processes inherit. Setting both is refused."""
    allow_anonymous: bool = False
    """Let the API start without tokens, every caller then being the one tenant `public`.
    Without it, an API with no tokens refuses to start."""
    max_upload_bytes: int = 2 * 1024**3
    """Largest accepted upload; larger bodies get 413 while streaming."""
    upload_part_bytes: int = 8 * 1024**2
    """Chunk size for streaming an upload into storage (S3 multipart part size, >= 5 MiB)."""
    public_url: str | None = None
    """Base URL the API advertises in `status_url`; defaults to the request's own URL."""
    kubernetes_namespace: str | None = None
    """When set, the API also creates a `PdfBatch` object in this namespace for each upload."""
    events_interval_s: float = Field(default=0.5, gt=0)
    """How often the API reads each batch that event streams watch (once per batch, whatever
    the number of streams) and sends the changes."""
    max_event_streams: int = Field(default=2000, ge=1)
    """Event streams one API process keeps open at once; more get 503."""
    max_event_streams_per_tenant: int = Field(default=100, ge=1)
    """Event streams one tenant may hold open in one API process; more get 429 with
    Retry-After, so one token cannot take the streams of every other tenant. Keep it well
    under `max_event_streams`."""

    # --- HTTP server limits (before auth: they protect the API from anyone who can reach it) --
    http_max_head_bytes: int = Field(default=32 * 1024, ge=1024)
    """Largest request head (request line and headers) the API reads; past it the client
    gets 431 and the connection is closed, before any body is read."""
    http_max_url_bytes: int = Field(default=8 * 1024, ge=256)
    """Longest request target (path and query); longer gets 414."""
    http_max_headers: int = Field(default=100, ge=16)
    """Most header fields in one request; more get 431."""
    http_idle_timeout_s: float = Field(default=5.0, gt=0)
    """Time a connection may stay open with no byte of a request on it, after it was made or
    after a response; then it is closed without an answer (keep-alive)."""
    http_head_timeout_s: float = Field(default=10.0, gt=0)
    """Time a request head may take to arrive, from its first byte; a slower one gets 408
    and the connection is closed (slowloris)."""
    http_body_timeout_s: float = Field(default=30.0, gt=0)
    """Longest wait for an upload's next bytes: a body that sends nothing for this long (or
    less than `http_body_min_bytes_per_s` times it over that much waiting) gets 408, its
    partial upload is removed and its slot freed. Only the API's waits for the client count,
    not the time it spends storing what arrived. Every other request body (its chunk framing
    and trailer included) is held to the same pace by the HTTP protocol: over twice this
    window while the API answers, and over this window for the rest of a body the API did
    not read, after its response."""
    http_body_min_bytes_per_s: int = Field(default=1024, ge=0)
    """Slowest upload body the API reads, averaged over `http_body_timeout_s` of waiting; 0
    keeps only the pause limit. A trickle (a byte every few seconds) would otherwise hold an
    upload slot, a pending multipart upload and its part buffer for as long as it likes."""
    http_write_timeout_s: float = Field(default=30.0, gt=0)
    """Longest the API's writes may wait on a client that does not read: once the kernel's
    buffers for a connection are full and bytes wait for the client, it must take them
    within this time, else the connection is dropped with what was left to send (a response,
    or the last bytes before a close). Also what stops a client from holding the API's
    shutdown: at shutdown such a connection is dropped at once."""
    http_max_connections: int = Field(default=4096, ge=1)
    """Connections one API process serves at once; requests beyond get 503 (health probes
    excepted), and connections beyond it plus a small reserve are closed at once. Keep it
    above `max_event_streams`: each stream holds a connection."""

    # --- per-tenant quotas on uploads and retries (429 with Retry-After; 0: no quota) --------
    quota_uploads_per_minute: int = Field(default=30, ge=0)
    """Uploads one tenant may start in any 60 s."""
    quota_bytes_per_day: int = Field(default=50 * 1024**3, ge=0)
    """Bytes one tenant may upload per UTC day, counted as they stream (refused ones too)."""
    quota_concurrent_batches: int = Field(default=10, ge=0)
    """Batches of one tenant not yet COMPLETED, FAILED or CANCELLED, uploads in progress
    included."""
    quota_retries_per_hour: int = Field(default=20, ge=0)
    """Retry requests (`POST /v1/batches/{id}/retry`) one tenant may make in any 3600 s; a
    retry also takes a concurrent-batch slot like an upload."""
    tenant_quotas: dict[str, TenantQuota] = Field(default_factory=dict)
    """Per-tenant overrides as JSON, e.g. `{"acme": {"bytes_per_day": 0}}`; a quota not
    named keeps the default above."""

    # --- per-tenant bounds on reads, per API process (429 with Retry-After past them) --------
    quota_concurrent_reports: int = Field(default=2, ge=1)
    """Whole reports (`GET /v1/batches/{id}/files`, JSON or CSV) one tenant may stream at once
    from one API process, a slow reader's for as long as it reads. One more waits up to 1 s
    for a slot, then gets 429 with Retry-After; its memory is one page of rows whatever the
    report's size."""
    quota_concurrent_reads: int = Field(default=4, ge=1)
    """Reads one tenant may have in flight at once in one API process: a status, a list, a
    report page, an event stream's opening, and each page of a whole report. Each holds at
    most one of the API's PostgreSQL connections, so a tenant holds at most this many and the
    rest stay for the other tenants (it must be below `API_POOL_CONNECTIONS`). One more waits
    up to 1 s for a slot, then gets 429 with Retry-After."""

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
    """Port of the operator's `/healthz` (leader and standby alike)."""
    operator_lease_name: str = Field(
        default="pdfqueue-operator", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
    )
    """The `coordination.k8s.io` Lease the operator replicas elect their one leader through."""
    operator_lease_namespace: str | None = None
    """The Lease's namespace; unset, the pod's own namespace (outside a pod it must be set,
    unless the operator runs `--standalone`)."""
    operator_lease_duration_s: int = Field(default=8, ge=2)
    """How long a standby waits, after it last saw the Lease renewed, before it takes over a
    leader that vanished (its node died). A leader that shuts down releases it at once."""
    operator_lease_renew_deadline_s: float = Field(default=5.0, gt=0)
    """A leader that has not renewed the Lease for this long stops acting and exits; it must be
    well below the lease duration, so it has stopped before any standby may take over."""
    operator_lease_retry_period_s: float = Field(default=1.5, gt=0)
    """How often the leader renews the Lease and a standby looks at it."""
    operator_namespace_tenants: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """`namespace:tenant` pairs, comma separated: the tenant of every PdfBatch in that namespace
    (its `spec.tenant` may only repeat it). `namespace:*` trusts the namespace's writers to name
    any tenant in `spec.tenant` (the API's namespace: only the API and cluster admins may create
    PdfBatches there). PdfBatches in any other namespace are refused. PDFQUEUE_KUBERNETES_NAMESPACE,
    when set, and the operator's own namespace (in a pod) count as `*`."""
    operator_source_prefix: str = "incoming/"
    """Folder (under the storage prefix) holding the ZIPs of PdfBatch manifests, one subfolder
    per tenant: `spec.source` must be `<storage>/incoming/<tenant>/...`. Never `uploads/` or
    `pdfs/`, so a manifest cannot name an upload or a linked PDF of any tenant."""

    # --- batches and archives -----------------------------------------------------------------
    batch_ttl_s: int = 3600
    """Live state in Redis expires this long after the batch's last activity."""
    max_members: int = 100_000
    """Most ZIP members one upload may hold (directories included)."""
    max_directory_bytes: int = Field(default=32 * 1024**2, ge=0)
    """Largest ZIP central directory, read before any member: 100,000 entries with names of
    ~200 bytes fit, while a directory of millions of empty entries is refused up front."""
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
    worker_max_jobs: int = Field(default=0, ge=0)
    """Jobs one worker runs at once; with `pdfs_per_job` this bounds the PDFs in flight.
    0: JOBS_PER_PARSER (4) per parsing process (`max_jobs`). Four jobs kept one parser busy
    but left two underfed (3.1 jobs in flight, a tenth of the host idle)."""
    pdfs_per_job: int = Field(default=32, ge=1, le=1000)
    """Most PDFs one `process` job handles: neighbours in the ZIP, read with one ranged GET
    and matched with one query. Each still gets its own outcome, and a retry redoes only the
    PDFs without one. A job also ends at `job_max_bytes`."""
    job_max_bytes: int = Field(default=4 * 1024**2, ge=64 * 1024)
    """Most bytes of the ZIP one `process` job reads (its members' compressed span; a
    bigger member is a job of its own). With `pdfs_per_job` it sizes a job by its work:
    32 text résumés of up to 128 KiB, but only two or three 300 dpi scans, which OCR takes
    seconds each to read."""
    worker_poll_delay_s: float = 0.05
    """How often an idle worker asks Redis for ready jobs (arq's default 0.5 s caps throughput)."""
    extract_processes: int = Field(default=0, ge=0)
    """Processes parsing PDFs per worker; 0 means one per CPU (`parsing_processes`)."""
    extract_timeout_s: float = 10.0
    """Hard limit for reading one PDF; the parsing process is killed after it. Keep it under
    PDFQUEUE_JOB_TIMEOUT_S - 4 s, the time a job gives parsing, or a PDF at the limit is
    retried until its tries run out before it fails with `timeout`."""
    extract_max_pages: int = 50
    """Pages read per PDF when looking for an email; an email is almost always on page one."""
    extract_max_page_chars: int = Field(default=100_000, ge=1)
    """Characters of one page's text searched for addresses. A dense page has under 15,000; the
    cap bounds the work a page of hostile text can cause (the search is linear in it)."""
    extract_memory_bytes: int = 320 * 1024**2
    """Address-space limit of each parsing process, so a decompression bomb fails one file
    (256 MiB still reads ordinary PDFs and inflates a member of `PDFQUEUE_MAX_PDF_BYTES`;
    PDFium aborts its process at the limit, which fails that file as `too_large`)."""
    extract_tasks_per_process: int = 5000
    """Recycle a parsing process after this many tasks to bound slow leaks (a task is one PDF,
    or the group of a job's PDFs; its memory limit already bounds a fast leak; recycling every
    500 PDFs cost ~0.8 ms of CPU per PDF)."""
    pdf_engine: Literal["pdfium", "pypdf"] = "pdfium"
    """The PDF parser of the parsing processes. `pdfium` (Chrome's PDF engine, in C++) reads
    the text layer, `mailto:` links and, by OCR, scans. `pypdf` is pure Python, a memory-safe
    mode for operators who would rather not run a C++ parser on hostile input, at 1.4x to 11x
    the CPU per PDF (`bench/results/parse-20261202T002302Z.json`) and more PDFs that time out;
    it reads the text layer only (no links, no OCR: a scan is `skipped_no_match`, `needs_ocr`)."""
    ocr_max_pages: int = Field(default=2, ge=0)
    """Pages per PDF read by OCR (Tesseract) when they have no usable text layer: the first
    such page, then the next only while no user matched. 0 turns OCR off (such files are
    `skipped_no_match` with reason `needs_ocr`)."""
    ocr_timeout_s: float = Field(default=10.0, gt=0)
    """Hard limit for reading one PDF when OCR is needed (~1-2 s a page on one core), in
    place of PDFQUEUE_EXTRACT_TIMEOUT_S; keep it under PDFQUEUE_JOB_TIMEOUT_S - 4 s too."""
    placeholder_domains: Annotated[frozenset[str], NoDecode] = frozenset(PLACEHOLDER_DOMAINS)
    """Domains, comma separated, whose addresses never link (nor do their subdomains'):
    résumé templates ship with them (`hello@reallygreatsite.com`, `email@example.com`)."""
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

    # --- completion webhooks (docs/user-guide/webhooks.md) ------------------------------------
    webhook_urls: dict[str, str] = Field(default_factory=dict)
    """Per-tenant completion webhook as JSON, e.g. `{"acme": "https://hooks.acme.example/pdf"}`:
    called when any of the tenant's batches completes, unless its upload named its own
    `callback_url`. Checked like a callback_url at every delivery."""
    webhook_secrets: dict[str, SecretStr] = Field(default_factory=dict)
    """Per-tenant webhook signing secrets as JSON, e.g. `{"acme": "<32+ random characters>"}`
    (mount it from a Secret); a tenant without one cannot name a callback_url. Never logged."""
    webhook_allow_http_loopback: bool = False
    """Development only: also call plain `http://` webhooks whose host is this host's loopback
    (127.0.0.0/8, ::1, or IPv4-mapped ::ffff:127.0.0.0/104; never a NAT64, SIIT or
    IPv4-compatible form). Without it only `https://` URLs resolving to public addresses
    are called."""
    webhook_deadline_s: float = Field(default=3600.0, gt=0)
    """How long after a batch completes its webhook is still retried (with backoff)."""
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    """Total time limit of one delivery attempt: resolving, connecting, sending, the answer's
    headers and its body together (a receiver that trickles bytes is cut off at it too)."""
    webhook_max_response_bytes: int = Field(default=64 * 1024, ge=0)
    """Most bytes of a receiver's answer read; the rest is never read (only the status counts)."""
    webhook_concurrency: int = Field(default=16, ge=1)
    """Delivery attempts one worker process runs at once, in slots of their own beside its
    `worker_max_jobs` PDF slots: deliveries never wait for PDFs, nor PDFs for deliveries."""
    webhook_tenant_concurrency: int = Field(default=2, ge=1)
    """Deliveries of one tenant in flight at once over all workers (attempting, or waiting
    out a retry's backoff); its others wait their turn, so a tenant whose receiver hangs delays
    only its own deliveries."""

    # --- fair dispatch (docs/architecture/fair-dispatch.md) -----------------------------------
    dispatch_fair: bool = True
    """Release process jobs into the queue fairly, in windows, instead of all at ingest."""
    dispatch_window_jobs: int = Field(default=0, ge=0)
    """Most released jobs ready or running at once over all tenants; 0 means twice the
    `worker_max_jobs` of the live workers."""
    dispatch_tenant_window_jobs: int = Field(default=0, ge=0)
    """Most released jobs ready or running at once per tenant; 0 means the overall window."""
    dispatch_batch_window_jobs: int = Field(default=0, ge=0)
    """Most released jobs ready or running at once per batch; 0 means the tenant window."""
    dispatch_tenant_weights: dict[str, Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=dict
    )
    """Per-tenant weights as JSON, e.g. `{"acme": 2}`: a tenant's share of the workers when
    tenants compete; a tenant not named weighs 1."""
    dispatch_tenant_inflight_caps: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict
    )
    """Per-tenant caps on released jobs ready or running at once, as JSON, e.g.
    `{"acme": 8}`; replaces the tenant window for the tenants named."""
    dispatch_tick_s: float = Field(default=1.0, gt=0)
    """How often each worker runs the dispatcher besides when jobs finish (recovers the
    slots of jobs whose worker died)."""

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

    @model_validator(mode="before")
    @classmethod
    def _add_service_passwords(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        for service in ("redis", "database"):
            password = data.get(f"{service}_password")
            if password:
                url = data.get(f"{service}_url") or cls.model_fields[f"{service}_url"].default
                data = {**data, f"{service}_url": _with_password(service, str(url), password)}
        return data

    @model_validator(mode="before")
    @classmethod
    def _read_tokens_file(cls, data: object) -> object:
        if not isinstance(data, dict) or not data.get("api_tokens_file"):
            return data
        if data.get("api_tokens"):
            msg = "PDFQUEUE_API_TOKENS and PDFQUEUE_API_TOKENS_FILE are both set: choose one"
            raise ValueError(msg)
        try:
            tokens = Path(data["api_tokens_file"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # the reason, never the content
            msg = f"PDFQUEUE_API_TOKENS_FILE cannot be read: {type(exc).__name__}"
            raise ValueError(msg) from None
        return {**data, "api_tokens": tokens.replace("\n", ",")}

    @model_validator(mode="after")
    def _check_lease_timing(self) -> Settings:
        """retry < renew deadline < lease duration, with room to stop in between (see
        pdfqueue_operator.lease)."""
        retry = self.operator_lease_retry_period_s
        deadline = self.operator_lease_renew_deadline_s
        duration = self.operator_lease_duration_s
        if not retry * (1 + LEASE_JITTER) < deadline <= duration - LEASE_STOP_MARGIN_S:
            msg = (
                f"operator lease timing: need PDFQUEUE_OPERATOR_LEASE_RETRY_PERIOD_S ({retry:g})"
                f" x {1 + LEASE_JITTER:g} < PDFQUEUE_OPERATOR_LEASE_RENEW_DEADLINE_S ({deadline:g})"
                f" <= PDFQUEUE_OPERATOR_LEASE_DURATION_S ({duration}) - {LEASE_STOP_MARGIN_S:g}"
            )
            raise ValueError(msg)
        return self

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        return parse_api_tokens(_entries(value))

    @field_validator("operator_namespace_tenants", mode="before")
    @classmethod
    def _parse_namespace_tenants(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        mapping: dict[str, str] = {}
        for entry in _entries(value):
            namespace, _, tenant = (part.strip() for part in entry.partition(":"))
            if not _NAMESPACE.fullmatch(namespace) or not (tenant == "*" or valid_tenant(tenant)):
                msg = f"PDFQUEUE_OPERATOR_NAMESPACE_TENANTS entry {entry[:80]!r} is not ns:tenant"
                raise ValueError(msg)
            if namespace in mapping:
                msg = f"PDFQUEUE_OPERATOR_NAMESPACE_TENANTS names namespace {namespace!r} twice"
                raise ValueError(msg)
            mapping[namespace] = tenant
        return mapping

    @field_validator("operator_source_prefix")
    @classmethod
    def _check_source_prefix(cls, value: str) -> str:
        segments = value.strip("/").split("/")
        if any(not _SEGMENT.fullmatch(s) for s in segments) or segments[0] in {"uploads", "pdfs"}:
            msg = (
                f"PDFQUEUE_OPERATOR_SOURCE_PREFIX {value!r} must be a plain folder"
                " other than uploads/ and pdfs/"
            )
            raise ValueError(msg)
        return "/".join(segments) + "/"

    @field_validator("users_table")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if not _IDENT.fullmatch(value):
            msg = f"PDFQUEUE_USERS_TABLE {value!r} is not a plain [schema.]table name"
            raise ValueError(msg)
        return value

    @field_validator("users_tenant_column")
    @classmethod
    def _check_column(cls, value: str | None) -> str | None:
        if value is not None and not _COLUMN.fullmatch(value):
            msg = f"PDFQUEUE_USERS_TENANT_COLUMN {value!r} is not a plain column name"
            raise ValueError(msg)
        return value

    @field_validator("trusted_tenants", "placeholder_domains", mode="before")
    @classmethod
    def _parse_names(cls, value: object, info: ValidationInfo) -> object:
        """A comma-separated set; domains compare in lower case."""
        if not isinstance(value, str):
            return value
        lower = info.field_name == "placeholder_domains"
        return frozenset(_entries(value.lower() if lower else value))

    @field_validator("quota_concurrent_reads")
    @classmethod
    def _check_read_share(cls, value: int) -> int:
        if value >= API_POOL_CONNECTIONS:
            msg = (
                f"PDFQUEUE_QUOTA_CONCURRENT_READS must be below the API's {API_POOL_CONNECTIONS}"
                " PostgreSQL connections, so that one tenant's reads leave some to the others"
            )
            raise ValueError(msg)
        return value

    @field_validator("upload_part_bytes")
    @classmethod
    def _check_part(cls, value: int) -> int:
        if value < 5 * 1024**2:
            msg = "PDFQUEUE_UPLOAD_PART_BYTES must be at least 5 MiB (the S3 multipart minimum)"
            raise ValueError(msg)
        return value

    def quota_for(self, tenant: str) -> Quota:
        """The tenant's quotas: its PDFQUEUE_TENANT_QUOTAS entry over the defaults."""
        default = Quota(
            uploads_per_minute=self.quota_uploads_per_minute,
            bytes_per_day=self.quota_bytes_per_day,
            concurrent_batches=self.quota_concurrent_batches,
            retries_per_hour=self.quota_retries_per_hour,
        )
        override = self.tenant_quotas.get(tenant)
        if override is None:
            return default
        return default.model_copy(update=override.model_dump(exclude_none=True))

    @property
    def export_traces(self) -> bool:
        """Export spans over OTLP/HTTP? Off unless an OTLP endpoint or exporter is configured."""
        if self.otel_traces_exporter:
            return "otlp" in _entries(self.otel_traces_exporter.lower())
        return bool(self.otel_exporter_otlp_endpoint)

    @property
    def parsing_processes(self) -> int:
        """Parsing processes per worker: `extract_processes`, or one per CPU of this host."""
        return self.extract_processes or os.cpu_count() or 1

    @property
    def max_jobs(self) -> int:
        """Jobs this worker runs at once: `worker_max_jobs`, or JOBS_PER_PARSER per parsing
        process."""
        return self.worker_max_jobs or JOBS_PER_PARSER * self.parsing_processes

    @property
    def replica_jobs(self) -> int:
        """The operator's backlog per worker replica where a Deployment does not say
        (`pdfqueue.io/target-per-replica`): `worker_max_jobs`, or JOBS_PER_PARSER, one
        parsing process's worth (the chart's pod). The operator cannot count a worker's CPUs,
        and its own are no guide."""
        return self.worker_max_jobs or JOBS_PER_PARSER

    @cached_property
    def arq_timeout_s(self) -> float:
        """arq's hard limit per job: a backstop that a job's own deadline should never reach."""
        return self.job_timeout_s + ARQ_TIMEOUT_MARGIN_S

    @property
    def retry_window_s(self) -> int:
        """How long a finished batch keeps what only a retry needs in Redis (the PdfBatch
        mirroring it): as long as its ZIP is kept, a week when uploads never expire."""
        return (self.uploads_expire_days or 7) * 86400

    def check_api_auth(self) -> None:
        """Fail closed: an API without tokens runs only when anonymous access is asked for."""
        if not self.api_tokens and not self.allow_anonymous:
            msg = (
                "PDFQUEUE_API_TOKENS is empty: the API refuses to start without tokens "
                "(set PDFQUEUE_ALLOW_ANONYMOUS=true to run it open, for local use only)"
            )
            raise ConfigurationError(msg)
        if self.api_tokens and self.allow_anonymous:
            msg = "PDFQUEUE_ALLOW_ANONYMOUS=true and PDFQUEUE_API_TOKENS are both set: choose one"
            raise ConfigurationError(msg)

    def check_shutdown_rule(self) -> None:
        """Refuse a completion wait that would cut running jobs off (grace > wait > timeout)."""
        if self.job_completion_wait_s <= self.arq_timeout_s:
            msg = (
                f"PDFQUEUE_JOB_COMPLETION_WAIT_S ({self.job_completion_wait_s}) must exceed "
                f"PDFQUEUE_JOB_TIMEOUT_S + {ARQ_TIMEOUT_MARGIN_S:g} ({self.arq_timeout_s:g})"
            )
            raise ValueError(msg)
