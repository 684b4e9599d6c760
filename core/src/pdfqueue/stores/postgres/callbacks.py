"""PostgreSQL: the callback URL an upload named, and each webhook delivery attempt."""

from __future__ import annotations

import asyncpg


async def remember(pool: asyncpg.Pool, batch_id: str, url: str) -> None:
    """Keep the callback an upload named (before the batch exists, so none is missed)."""
    await pool.execute(
        "INSERT INTO pdfqueue_callbacks (batch_id, url) VALUES ($1, $2)"
        " ON CONFLICT (batch_id) DO NOTHING",
        batch_id,
        url,
    )


async def forget(pool: asyncpg.Pool, batch_id: str) -> None:
    """Drop the callback of an upload that did not become a batch."""
    await pool.execute("DELETE FROM pdfqueue_callbacks WHERE batch_id = $1", batch_id)


async def callback_of(pool: asyncpg.Pool, batch_id: str) -> str | None:
    url: str | None = await pool.fetchval(
        "SELECT url FROM pdfqueue_callbacks WHERE batch_id = $1", batch_id
    )
    return url


async def record_attempt(
    pool: asyncpg.Pool,
    batch_id: str,
    round_: int,
    attempt: int,
    url: str,
    *,
    status_code: int | None = None,
    error: str | None = None,
) -> None:
    await pool.execute(
        "INSERT INTO pdfqueue_webhook_deliveries"
        " (batch_id, round, attempt, url, status_code, error) VALUES ($1, $2, $3, $4, $5, $6)",
        batch_id,
        round_,
        attempt,
        url,
        status_code,
        error,
    )
