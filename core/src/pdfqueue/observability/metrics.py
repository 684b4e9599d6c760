"""Prometheus metrics of every pdfqueue process, grouped by the component that exports them.

Each process serves its own registry (the API on its `/metrics` route, a worker or the
operator on `PDFQUEUE_METRICS_PORT`) and Prometheus sums over processes; there is no
multiprocess mode. Metrics are created unregistered and a process registers only its own
groups (`register("worker")`), so the API never exports an always-zero worker gauge.
Label values are bounded: outcomes, reasons, stages, routes, statuses; never a batch id or an
email address.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.registry import Collector

from pdfqueue.domain.errors import transient_reasons
from pdfqueue.domain.models import BatchStatus, Outcome

log = logging.getLogger(__name__)

STAGES = ("read", "extract", "match", "store", "claim", "record")
"""Steps of one `process` job, in order; each is a span and a histogram series."""
JOB_FUNCTIONS = ("ingest", "process")
JOB_RESULTS = ("success", "retry", "error", "cancelled")
RETRY_REASONS = transient_reasons()
"""What `pdfqueue.domain.errors.transient_reason` returns; listed so their series exist at 0."""

# Created unregistered: `register` exports a process's own groups.
_Counter = partial(Counter, registry=None)
_Gauge = partial(Gauge, registry=None)
_Histogram = partial(Histogram, registry=None)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30)
_SIZE_BUCKETS = tuple(float(4**n * 1024) for n in range(12))  # 1 KiB .. 4 GiB

# --- processes running the queue poller (pdfqueue.runtime.queue_gauges) -------------------------
HEARTBEAT = _Gauge(
    "pdfqueue_heartbeat_timestamp_seconds",
    "Unix time of the last tick of this process's event loop (stale means the loop is stuck).",
)
EVENT_LOOP_LAG = _Gauge(
    "pdfqueue_event_loop_lag_seconds",
    "How late the last background tick woke up: time the event loop was blocked.",
)
REDIS_UP = _Gauge("pdfqueue_redis_up", "1 if the last poll of Redis succeeded, else 0.")
QUEUE_READY = _Gauge(
    "pdfqueue_queue_ready_jobs",
    "Jobs whose time has come (ZCOUNT queue -inf now); arq keeps running jobs in the set too.",
    ["queue"],
)
QUEUE_PENDING = _Gauge(
    "pdfqueue_queue_pending_jobs",
    "Process jobs registered by fair dispatch and not yet released into the queue.",
    ["queue"],
)
QUEUE_DEFERRED = _Gauge(
    "pdfqueue_queue_deferred_jobs",
    "Jobs scheduled for later, mostly retries waiting out their backoff.",
    ["queue"],
)
QUEUE_OLDEST_AGE = _Gauge(
    "pdfqueue_queue_oldest_ready_age_seconds",
    "Age of the oldest ready job (0 when none is ready).",
    ["queue"],
)
REDIS_USED_MEMORY = _Gauge("pdfqueue_redis_used_memory_bytes", "Redis INFO used_memory.")
REDIS_MAXMEMORY = _Gauge(
    "pdfqueue_redis_maxmemory_bytes", "Redis INFO maxmemory (0 means no limit)."
)

# --- processes polling PostgreSQL too (pdfqueue.runtime.store_gauges) ---------------------------
POSTGRES_UP = _Gauge("pdfqueue_postgres_up", "1 if the last poll of PostgreSQL succeeded, else 0.")
POSTGRES_CONNECTIONS = _Gauge(
    "pdfqueue_postgres_connections",
    "Client connections open on PostgreSQL, every client's (pg_stat_activity).",
)
POSTGRES_CONNECTION_LIMIT = _Gauge(
    "pdfqueue_postgres_connection_limit",
    "Client connections PostgreSQL allows a non-superuser: max_connections less the reserved.",
)
STORAGE_UP = _Gauge(
    "pdfqueue_storage_up",
    "1 if the last check of the object store succeeded (S3: HEAD of the bucket; a folder:"
    " it exists), else 0.",
)
STORAGE_WRITABLE = _Gauge(
    "pdfqueue_storage_writable",
    "0 from a write the object store refused (an outage, a full disk, a quota, a revoked"
    " permission) until one it took, else 1.",
)
BATCH_PROGRESS_AGE = _Gauge(
    "pdfqueue_batch_oldest_progress_age_seconds",
    "Seconds since the PROCESSING batch that moved least recently counted a file (0 when none"
    " is processing); as this process saw it, so never more than its uptime.",
)

# --- every process ---------------------------------------------------------------------------
BATCHES = _Counter(
    "pdfqueue_batches", "Batches that entered a status (PENDING when created).", ["status"]
)
DATA_REMOVED = _Counter(
    "pdfqueue_data_removed",
    "What retention and erasure removed, by action (purge, erase_batch, erase_person) and"
    " what (files: per-file rows; objects; bytes of those objects).",
    ["action", "what"],
)
REMOVAL_ACTIONS = ("purge", "erase_batch", "erase_person")
REBUILT = ("state", "jobs", "ingest")
"""What a rebuild re-created from PostgreSQL (`pdfqueue.recovery`): the live state, the lost
process jobs (from the ZIP's directory), or the ingest of a batch never listed."""
BATCHES_REBUILT = _Counter(
    "pdfqueue_batches_rebuilt",
    "Running batches whose live state or queued work was missing from Redis and was rebuilt"
    " from PostgreSQL (what: state, jobs, ingest).",
    ["what"],
)

# --- API -------------------------------------------------------------------------------------
HTTP_DURATION = _Histogram(
    "pdfqueue_http_request_duration_seconds",
    "HTTP request latency, body streaming included.",
    ["method", "route", "status"],
    buckets=_LATENCY_BUCKETS,
)
HTTP_REQUEST_SIZE = _Histogram(
    "pdfqueue_http_request_size_bytes",
    "Bytes of request body received (uploads on POST /v1/batches).",
    ["method", "route", "status"],
    buckets=_SIZE_BUCKETS,
)

# --- worker ----------------------------------------------------------------------------------
DOCUMENTS = _Counter(
    "pdfqueue_documents",
    "Files given their one outcome (counted once, whatever the retries).",
    ["outcome", "reason"],
)
OCR_PAGES = _Counter(
    "pdfqueue_ocr_pages", "Pages read by OCR because they had no usable text layer."
)
OCR_DEFERRED = _Counter(
    "pdfqueue_ocr_deferred",
    "Scans left for a later try of their job: the worker's OCR turns were all taken (a busy"
    " OCR queue, not a failure).",
)
STAGE_DURATION = _Histogram(
    "pdfqueue_stage_duration_seconds",
    "Duration of one step of a process job: read, extract, match and record serve all of"
    " its PDFs at once; store and claim are one PDF each.",
    ["stage"],
    buckets=_LATENCY_BUCKETS,
)
JOB_DURATION = _Histogram(
    "pdfqueue_job_duration_seconds",
    "Duration of one try of an arq job, by how it ended.",
    ["function", "result"],
    buckets=_LATENCY_BUCKETS,
)
JOBS_IN_PROGRESS = _Gauge(
    "pdfqueue_jobs_in_progress", "Jobs this process is running now.", ["function"]
)
RETRIES = _Counter(
    "pdfqueue_retries",
    "Tries that failed on a flaky dependency and were deferred.",
    ["function", "reason"],
)
WORKER_MAX_JOBS = _Gauge(
    "pdfqueue_worker_max_jobs",
    "Jobs this worker process may run at once; one series per live worker process.",
)
WEBHOOK_RESULTS = ("delivered", "retried", "gave_up", "refused")
"""How one attempt at a completion webhook ended: accepted (2xx), failed and tried again later,
failed past webhook_deadline_s, or refused for good (URL not allowed, redirect, no secret)."""
WEBHOOK_DELIVERIES = _Counter(
    "pdfqueue_webhook_deliveries",
    "Attempts at delivering a completion webhook, by how each ended.",
    ["result"],
)

# --- operator --------------------------------------------------------------------------------
OPERATOR_DESIRED_REPLICAS = _Gauge(
    "pdfqueue_operator_desired_replicas",
    "Worker replicas the operator wants (backlog-based, after min/max and stabilization).",
)
OPERATOR_REPLICAS = _Gauge(
    "pdfqueue_operator_replicas",
    "Ready replicas of the worker Deployment as the operator last saw them.",
)
OPERATOR_LEADER = _Gauge(
    "pdfqueue_operator_leader",
    "1 on the operator process holding the Lease (the one that acts), 0 on standbys.",
)
OPERATOR_SCALING_DECISIONS = _Counter(
    "pdfqueue_operator_scaling_decisions",
    "Changes of the worker Deployment's replicas made by the operator (direction: up, down).",
    ["direction"],
)

_COMMON: tuple[Collector, ...] = (BATCHES, BATCHES_REBUILT, DATA_REMOVED)
_GROUPS: dict[str, tuple[Collector, ...]] = {
    # Only where a pdfqueue.runtime.queue_gauges.QueueGauges task runs: a heartbeat no one
    # stamps would read as a stuck process.
    "queue": (
        HEARTBEAT,
        EVENT_LOOP_LAG,
        REDIS_UP,
        QUEUE_READY,
        QUEUE_PENDING,
        QUEUE_DEFERRED,
        QUEUE_OLDEST_AGE,
        REDIS_USED_MEMORY,
        REDIS_MAXMEMORY,
    ),
    "api": (HTTP_DURATION, HTTP_REQUEST_SIZE),
    "worker": (
        DOCUMENTS,
        OCR_PAGES,
        OCR_DEFERRED,
        STAGE_DURATION,
        JOB_DURATION,
        JOBS_IN_PROGRESS,
        RETRIES,
        WORKER_MAX_JOBS,
        WEBHOOK_DELIVERIES,
    ),
    # Only where a pdfqueue.runtime.store_gauges.StoreGauges task runs: an unset "up" would read 0.
    "postgres": (POSTGRES_UP, POSTGRES_CONNECTIONS, POSTGRES_CONNECTION_LIMIT, BATCH_PROGRESS_AGE),
    # Only where StoreGauges checks the object store too: an unset "up" would read 0.
    "storage": (STORAGE_UP, STORAGE_WRITABLE),
    # Leader only: a standby's zeros would read as a fleet that wants no workers.
    "operator": (OPERATOR_DESIRED_REPLICAS, OPERATOR_REPLICAS, OPERATOR_SCALING_DECISIONS),
    # Every operator process, leader or standby.
    "election": (OPERATOR_LEADER,),
}
_registered: set[int] = set()


def _initialize() -> None:
    """Create the series of known label values at 0, so rates and alerts see them at once."""
    for status in BatchStatus:
        BATCHES.labels(status.value)
    for what in REBUILT:
        BATCHES_REBUILT.labels(what)
    for stage in STAGES:
        STAGE_DURATION.labels(stage)
    for function in JOB_FUNCTIONS:
        JOBS_IN_PROGRESS.labels(function)
        for result in JOB_RESULTS:
            JOB_DURATION.labels(function, result)
        for reason in RETRY_REASONS:
            RETRIES.labels(function, reason)
    for result in WEBHOOK_RESULTS:
        WEBHOOK_DELIVERIES.labels(result)
    for direction in ("up", "down"):
        OPERATOR_SCALING_DECISIONS.labels(direction)
    for action in REMOVAL_ACTIONS:
        for what in ("files", "objects", "bytes"):
            DATA_REMOVED.labels(action, what)


_initialize()


def register(*components: str) -> None:
    """Export the common metrics and those of `components` ("api", "worker", "operator",
    "election" for every operator process, "queue" for a process running
    `pdfqueue.runtime.queue_gauges.QueueGauges`, "postgres" for one running
    `pdfqueue.runtime.store_gauges.StoreGauges`, "storage" for one whose StoreGauges checks the
    object store).

    Idempotent: tests run the API and workers in one process.
    """
    wanted: Iterable[Collector] = _COMMON + tuple(m for c in components for m in _GROUPS[c])
    for metric in wanted:
        if id(metric) not in _registered:
            REGISTRY.register(metric)
            _registered.add(id(metric))


def serve(port: int, addr: str = "0.0.0.0") -> bool:  # noqa: S104 (scraped from other pods)
    """Serve `/metrics` for this process on `port` (0: off). A busy port is logged, not fatal:
    a worker without metrics still does its work."""
    if not port:
        return False
    try:
        start_http_server(port, addr=addr)
    except OSError as exc:
        log.warning("metrics endpoint not started on port %d: %s", port, exc)
        return False
    log.info("metrics on http://%s:%d/metrics", addr, port)
    return True


def batch_entered(status: BatchStatus) -> None:
    BATCHES.labels(status.value).inc()


def batch_rebuilt(what: str) -> None:
    """A running batch got back what Redis had lost (one of REBUILT)."""
    BATCHES_REBUILT.labels(what).inc()


def document_counted(outcome: Outcome, reason: str | None) -> None:
    DOCUMENTS.labels(outcome.value, reason or "none").inc()


def ocr_pages(pages: int) -> None:
    """For a worker, the pages one read of a PDF took from OCR."""
    if pages:
        OCR_PAGES.inc(pages)


def ocr_deferred(pdfs: int) -> None:
    """For a worker, scans a job left for its next try (`pdfqueue_worker.extractor.Deferred`)."""
    if pdfs:
        OCR_DEFERRED.inc(pdfs)


def operator_observed(desired: int, ready: int) -> None:
    """For the operator, each reconciliation: what it wants and what is ready."""
    OPERATOR_DESIRED_REPLICAS.set(desired)
    OPERATOR_REPLICAS.set(ready)


def operator_scaled(previous: int, new: int) -> None:
    """For the operator, when it patches the worker Deployment's replicas."""
    if new != previous:
        OPERATOR_SCALING_DECISIONS.labels("up" if new > previous else "down").inc()


def data_removed(action: str, files: int, objects: int, nbytes: int) -> None:
    """A purge or an erasure removed `files` rows and `objects` objects of `nbytes` bytes."""
    for what, n in (("files", files), ("objects", objects), ("bytes", nbytes)):
        DATA_REMOVED.labels(action, what).inc(n)


def webhook_attempted(result: str) -> None:
    """For a worker, how one attempt at a completion webhook ended (one of WEBHOOK_RESULTS)."""
    WEBHOOK_DELIVERIES.labels(result).inc()


def operator_leading(leading: bool) -> None:
    """For an operator process, whether it holds the Lease now."""
    OPERATOR_LEADER.set(1 if leading else 0)
