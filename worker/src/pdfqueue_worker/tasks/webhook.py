"""The `webhook` task: tell a batch's caller it ended, signed, retried for a bounded time.

Deliveries run on a queue of their own (`keys.delivery_queue`), in delivery slots beside the
PDF slots (`pdfqueue_worker.deliveries`), released by fair dispatch with a per-tenant cap:
a receiver that never answers holds only its own tenant's delivery slots, each attempt for
at most `webhook_timeout_s`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import wraps
from typing import Any

import httpx
from arq import Retry
from pydantic import SecretStr
from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.errors import (
    CallbackUnresolved,
    TransientError,
    UnsafeCallback,
    transient_reason,
)
from pdfqueue.domain.models import BatchStatus, BatchSummary
from pdfqueue.domain.settings import Settings
from pdfqueue.lifecycle import Lifecycle
from pdfqueue.observability import metrics
from pdfqueue.runtime.connections import Stores
from pdfqueue.stores.postgres.callbacks import callback_of, record_attempt
from pdfqueue.stores.redis.fair_dispatch import Dispatcher, chunks_before
from pdfqueue.stores.redis.queue import Job
from pdfqueue.webhooks import body, event_of, parse, post
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.observe import observed_job

log = logging.getLogger(__name__)
MAX_TRIES = 100_000
"""arq's limit on tries of a delivery: never the one that ends it (webhook_deadline_s is)."""
Task = Callable[..., Coroutine[Any, Any, Any]]
ANNOUNCED = frozenset({BatchStatus.COMPLETED, BatchStatus.FAILED})
"""The ends a webhook tells: a cancelled batch's caller cancelled it."""


async def announce(stores: Stores, batch_id: str) -> None:
    """Queue the webhook of the batch's current round's end (once: the id says which)."""
    await _announce(stores.settings, stores.redis, stores.lifecycle, batch_id)


async def _announce(settings: Settings, redis: Redis, lifecycle: Lifecycle, batch_id: str) -> None:
    """Register the round's delivery as the tenant's pending work on the delivery queue.

    The worker's lifecycle runs it on every completion and failure it writes, a redelivered
    one included:
    the round's chunk number makes the delivery once per round."""
    if not (settings.webhook_secrets or settings.webhook_urls):
        return  # no tenant can have a webhook: no job per batch either
    found = await lifecycle.reads.read(batch_id)
    if found is None:
        return
    round_ = found.summary.retries
    job = Job(
        keys.delivery_job(batch_id, round_),
        "webhook",
        {"batch_id": batch_id, "retry_round": round_},
    )
    dispatcher = Dispatcher.for_deliveries(redis, settings)
    first = await chunks_before(redis, dispatcher.queue_name, batch_id, f"round:{round_}")
    await dispatcher.register(batch_id, found.tenant, [job], 1, first)
    await dispatcher.dispatch()


def refills(task: Task) -> Task:
    """After a delivery ends (not when it is retried), release the next into its slot.

    A refill that fails costs nothing but latency: every worker's tick dispatches anyway."""

    @wraps(task)
    async def wrapper(ctx: dict[str, Any], **kwargs: Any) -> Any:
        result = await task(ctx, **kwargs)
        deps: Deps = ctx["deps"]
        try:
            await Dispatcher.for_deliveries(deps.redis, deps.settings).dispatch(ctx["job_id"])
        except Exception as exc:
            log.warning("delivery refill failed: %r", exc, extra={"job_id": ctx["job_id"]})
        return result

    return wrapper


@dataclass(frozen=True)
class Delivery:
    """One attempt at one round's webhook: where, signed with what, saying what."""

    batch_id: str
    round: int
    attempt: int
    url: str
    secret: SecretStr | None
    summary: BatchSummary


@refills
@observed_job("webhook", link=True)
async def webhook(ctx: dict[str, Any], *, batch_id: str, retry_round: int) -> str:
    """POST the batch's final counts to its callback; retry until webhook_deadline_s.

    No failure ends a delivery unrecorded: a store that does not answer (reading the batch,
    recording the attempt) or an error of no known kind is tried again with the backoff, as
    a receiver that does not answer is; arq would otherwise fail the job for good."""
    deps: Deps = ctx["deps"]
    delivery: Delivery | None = None
    try:
        found = await _delivery(deps, batch_id, retry_round, ctx["job_try"])
        if isinstance(found, str):
            return found
        delivery = found
        return await _deliver(deps, ctx, delivery)
    except Retry:
        raise
    except Exception as exc:
        return _not_run(deps, ctx, batch_id, delivery, exc)


async def _deliver(deps: Deps, ctx: dict[str, Any], delivery: Delivery) -> str:
    """One attempt, recorded: delivered, refused for good, or tried again (Retry)."""
    if delivery.secret is None:
        await _note(deps, delivery, error="no webhook secret for the tenant")
        metrics.webhook_attempted("refused")
        return "no secret"
    try:
        code = await _post(deps, delivery, delivery.secret)
    except CallbackUnresolved as exc:  # a name server may be down for a while: not a refusal
        return await _failed(deps, ctx, delivery, exc.why)
    except UnsafeCallback as exc:
        await _note(deps, delivery, error=exc.why)
        metrics.webhook_attempted("refused")
        log.warning("webhook refused: %s", exc.why, extra={"batch_id": delivery.batch_id})
        return f"refused: {exc.why}"
    except (httpx.HTTPError, OSError) as exc:
        return await _failed(deps, ctx, delivery, type(exc).__name__)
    except Exception as exc:  # not one the HTTP client is known to raise: a bug, say so
        log.error(
            "webhook attempt failed unexpectedly: %r",
            exc,
            exc_info=exc,
            extra={"batch_id": delivery.batch_id},
        )
        return await _failed(deps, ctx, delivery, type(exc).__name__)
    await _note(deps, delivery, code)
    return _answered(deps, ctx, delivery, code)


async def _failed(deps: Deps, ctx: dict[str, Any], delivery: Delivery, error: str) -> str:
    """The attempt got no answer: recorded with `error`, then tried again or given up."""
    await _note(deps, delivery, error=error)
    return _again(deps, ctx, delivery.summary.completed_at, error)


def _not_run(
    deps: Deps, ctx: dict[str, Any], batch_id: str, delivery: Delivery | None, exc: Exception
) -> str:
    """Reading the batch or recording the attempt failed (Redis or PostgreSQL down, or a bug):
    nothing may be recorded now, so the delivery runs again with the backoff (until the
    deadline once the batch was read; while it cannot be read, its completion is unknown)."""
    if isinstance(exc, TransientError):
        log.warning("webhook attempt not run: %r", exc, extra={"batch_id": batch_id})
    else:
        log.error("webhook attempt failed: %r", exc, exc_info=exc, extra={"batch_id": batch_id})
    completed_at = delivery.summary.completed_at if delivery is not None else None
    return _again(deps, ctx, completed_at, transient_reason(exc))


def _answered(deps: Deps, ctx: dict[str, Any], delivery: Delivery, code: int) -> str:
    """Done on 2xx; a redirect is final (never followed); anything else is tried again."""
    if 200 <= code < 300:
        metrics.webhook_attempted("delivered")
        return f"delivered ({code})"
    if 300 <= code < 400:
        metrics.webhook_attempted("refused")
        return f"refused: a redirect ({code}) is not followed"
    return _again(deps, ctx, delivery.summary.completed_at, f"answered {code}")


async def _delivery(deps: Deps, batch_id: str, round_: int, attempt: int) -> Delivery | str:
    """What this attempt sends where, or why there is nothing to send."""
    found = await deps.lifecycle.reads.read(batch_id)
    if found is None:
        return "unknown batch"
    tenant, summary = found.tenant, found.summary
    url = await callback_of(deps.pool, batch_id) or deps.settings.webhook_urls.get(tenant)
    if not url:
        return "no webhook"
    if summary.status not in ANNOUNCED or summary.retries != round_:
        return "not this round's end"
    secret = deps.settings.webhook_secrets.get(tenant)
    return Delivery(batch_id, round_, attempt, url, secret, summary)


async def _post(deps: Deps, delivery: Delivery, secret: SecretStr) -> int:
    settings = deps.settings
    target = parse(delivery.url, allow_http_loopback=settings.webhook_allow_http_loopback)
    return await post(
        target,
        secret.get_secret_value(),
        body(delivery.summary),
        f"{delivery.batch_id}:{delivery.round}",
        event=event_of(delivery.summary),
        timeout_s=settings.webhook_timeout_s,
        max_response_bytes=settings.webhook_max_response_bytes,
    )


async def _note(
    deps: Deps, delivery: Delivery, code: int | None = None, error: str | None = None
) -> None:
    await record_attempt(
        deps.pool,
        delivery.batch_id,
        delivery.round,
        delivery.attempt,
        delivery.url,
        status_code=code,
        error=error,
    )


def _again(deps: Deps, ctx: dict[str, Any], completed_at: datetime | None, why: str) -> str:
    """Retry with backoff while the deadline allows; else give up (the attempts are recorded)."""
    delay = deps.backoff_s(ctx["job_try"])
    since = (datetime.now(UTC) - (completed_at or datetime.now(UTC))).total_seconds()
    if since + delay > deps.settings.webhook_deadline_s:
        metrics.webhook_attempted("gave_up")
        return f"gave up: {why}"
    metrics.webhook_attempted("retried")
    raise Retry(defer=delay)
