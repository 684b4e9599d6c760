"""Completion webhooks: where, how and for how long a batch's end is delivered."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class WebhookSettings(BaseModel):
    """Completion webhooks (docs/user-guide/webhooks.md).

    Where, how and how long a batch's completion is delivered.
    """

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
