"""The worker's jobs: how many at once, their deadlines, and their tries."""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, Field

ARQ_TIMEOUT_MARGIN_S = 5.0
"""Time a job has, after its own deadline, to give up cleanly before arq cancels it."""
JOBS_PER_PARSER = 4
"""Jobs a worker runs at once per parsing process, unless PDFQUEUE_WORKER_MAX_JOBS says:
enough that one job's parsing overlaps the others' reads, queries and PUTs."""


class WorkerSettings(BaseModel):
    """Worker: jobs, deadlines and tries.

    How the worker takes work from the queue, how long a job may run, and how often it is tried.
    """

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

    def check_shutdown_rule(self) -> None:
        """Refuse a completion wait that would cut running jobs off (grace > wait > timeout)."""
        if self.job_completion_wait_s <= self.arq_timeout_s:
            msg = (
                f"PDFQUEUE_JOB_COMPLETION_WAIT_S ({self.job_completion_wait_s}) must exceed "
                f"PDFQUEUE_JOB_TIMEOUT_S + {ARQ_TIMEOUT_MARGIN_S:g} ({self.arq_timeout_s:g})"
            )
            raise ValueError(msg)
