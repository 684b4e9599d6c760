"""The API process: uploads, event streams, and its HTTP server's limits."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator


class ApiSettings(BaseModel):
    """API: uploads, PdfBatch objects and event streams.

    What the API process accepts and serves beyond its HTTP limits.
    """

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
    redis_memory_refuse_share: float = Field(default=0.9, gt=0, le=1)
    """New uploads and retries get 503 with Retry-After while Redis's used memory is past
    this share of its maxmemory (1: only when it refuses writes). Under noeviction a full
    Redis refuses every write, the counting of running batches included: refusing new work
    first keeps the room those need to finish. /readyz says so, and stays ready for reads."""
    database_connections_refuse_share: float = Field(default=0.9, gt=0, le=1)
    """New uploads and retries get 503 with Retry-After while PostgreSQL's client connections
    (every client's) are past this share of `max_connections` less the reserved ones: the
    workers that new work would add could not connect. /readyz says so, and stays ready."""

    @field_validator("upload_part_bytes")
    @classmethod
    def _check_part(cls, value: int) -> int:
        if value < 5 * 1024**2:
            msg = "PDFQUEUE_UPLOAD_PART_BYTES must be at least 5 MiB (the S3 multipart minimum)"
            raise ValueError(msg)
        return value


class HttpSettings(BaseModel):
    """HTTP server limits (before auth: they protect the API from anyone who can reach it).

    Byte limits and deadlines of every phase of a connection, held by the API's protocol.
    """

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
