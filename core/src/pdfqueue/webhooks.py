"""Completion webhooks, the HTTP client: which URLs may be called, the signed body, one attempt.

Their rows (the callback an upload named, each attempt) are `pdfqueue.stores.postgres.callbacks`.

A URL is checked when it is given and again at every delivery: https only (plain http only to
a loopback address, and only with PDFQUEUE_WEBHOOK_ALLOW_HTTP_LOOPBACK), no credentials in it,
and every address its host resolves to must be public. The request then goes to the checked
address itself (the URL's host is kept for the Host header, SNI and the certificate check), so
a name cannot resolve to something else between the check and the connection; redirects are
never followed, and proxies from the environment are ignored.

Each request is signed like Stripe's: `Pdfqueue-Signature: t=<unix time>,v1=<hex>`, the hex
being HMAC-SHA256 with the tenant's secret over `<t>.<body>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from pdfqueue.domain.addresses import host_refusal, is_loopback, refusal
from pdfqueue.domain.errors import CallbackUnresolved, UnsafeCallback
from pdfqueue.domain.models import COUNTERS, BatchStatus, BatchSummary

SIGNATURE_HEADER = "Pdfqueue-Signature"
EVENT_HEADER = "Pdfqueue-Event"
DELIVERY_HEADER = "Pdfqueue-Delivery"
MAX_URL_CHARS = 2048

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Target:
    """A callback URL taken apart: where to connect, and what to call the host."""

    url: str
    scheme: str
    host: str
    port: int
    path: str


def parse(url: str, *, allow_http_loopback: bool) -> Target:
    """The URL's parts, or UnsafeCallback for anything but a plain http(s) URL."""
    if len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise UnsafeCallback(url, "not a URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeCallback(url, "not a URL") from exc
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise UnsafeCallback(url, "only https:// URLs are called")
    if parts.scheme == "http" and not allow_http_loopback:
        raise UnsafeCallback(url, "only https:// URLs are called")
    if parts.username is not None or parts.password is not None:
        raise UnsafeCallback(url, "credentials in the URL are not accepted")
    if (why := host_refusal(parts.hostname)) is not None:
        raise UnsafeCallback(url, why)
    path = parts.path or "/"
    if parts.query:
        path += f"?{parts.query}"
    default = 443 if parts.scheme == "https" else 80
    return Target(url, parts.scheme, parts.hostname, port or default, path)


def check_address(address: Address, target: Target) -> None:
    """Refuse any address but a public one (or loopback, for the development http case);
    an IPv6 address carrying an IPv4 one is judged by both (pdfqueue.domain.addresses)."""
    if target.scheme == "http":
        if not is_loopback(address):
            raise UnsafeCallback(target.url, "plain http is only allowed to a loopback address")
        return
    if (refused := refusal(address)) is not None:
        culprit = refused.culprit
        carrier = f", carried by {address}" if culprit != address else ""
        why = f"it resolves to a non-public address ({culprit}){carrier}"
        raise UnsafeCallback(target.url, why)


async def resolve(target: Target) -> list[Address]:
    """Every address the host resolves to, each checked; UnsafeCallback if any is refused,
    CallbackUnresolved (one) if the host resolves to nothing."""
    try:
        literal = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None:
        found: list[Address] = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                target.host, target.port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            raise CallbackUnresolved(target.url) from exc
        found = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not found:
        raise CallbackUnresolved(target.url)
    for address in found:
        check_address(address, target)
    return found


async def checked(url: str, *, allow_http_loopback: bool) -> Target:
    """Parse and resolve `url` now: what an upload's callback_url must pass."""
    target = parse(url, allow_http_loopback=allow_http_loopback)
    await resolve(target)
    return target


def event_of(summary: BatchSummary) -> str:
    """`batch.failed` for a batch that ended FAILED as a whole, else `batch.completed`."""
    return "batch.failed" if summary.status is BatchStatus.FAILED else "batch.completed"


def body(summary: BatchSummary) -> bytes:
    """The JSON body of a batch's end: its final counts, and why a failed one failed."""
    fields = _FIELDS | ({"error", "reason"} if summary.status is BatchStatus.FAILED else set())
    data = {
        "event": event_of(summary),
        **summary.model_dump(mode="json", include=fields),
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


_FIELDS = {
    "batch_id",
    "status",
    "total_files",
    "processed",
    *COUNTERS,  # every outcome's count, so that they add up to `processed`
    "ignored",
    "retries",
    "created_at",
    "completed_at",
    "file_name",
}


def signature(secret: str, timestamp: int, payload: bytes) -> str:
    """The signature header's value: `t=<timestamp>,v1=<HMAC-SHA256 of "<t>.<body>">`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + payload, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


async def post(
    target: Target,
    secret: str,
    payload: bytes,
    delivery: str,
    *,
    timeout_s: float,
    max_response_bytes: int = 64 * 1024,
    event: str = "batch.completed",
) -> int:
    """One attempt: resolve and check again, connect to a checked address, POST once.

    Returns the status code (a redirect is returned as is, never followed). The whole attempt
    (resolving, connecting, sending, the answer's headers) has `timeout_s` in all, not per
    step: httpx's own timeout is per read, so a receiver sending a byte a second would hold
    the attempt for ever. TimeoutError past it. Of the answer's body at most
    `max_response_bytes` are read, within what is left of the deadline; once the headers are
    in, the status stands whatever the body does.
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with asyncio.timeout_at(deadline):
        address = (await resolve(target))[0]
    host = f"[{address}]" if address.version == 6 else str(address)
    headers = {
        "Host": target.host if target.port in {80, 443} else f"{target.host}:{target.port}",
        "Content-Type": "application/json",
        "User-Agent": "pdfqueue-webhook",
        EVENT_HEADER: event,
        DELIVERY_HEADER: delivery,
        SIGNATURE_HEADER: signature(secret, int(time.time()), payload),
    }
    async with httpx.AsyncClient(
        follow_redirects=False, trust_env=False, timeout=timeout_s
    ) as client:
        request = client.build_request(
            "POST",
            f"{target.scheme}://{host}:{target.port}{target.path}",
            content=payload,
            headers=headers,
            extensions={"sni_hostname": target.host},
        )
        async with asyncio.timeout_at(deadline):
            response = await client.send(request, stream=True)
        try:
            async with asyncio.timeout_at(deadline):
                await _read_some(response, max_response_bytes)
        except (TimeoutError, httpx.HTTPError):
            pass  # the answer's status is in: a body that trickles or breaks changes nothing
        finally:
            await response.aclose()
    return response.status_code


async def _read_some(response: httpx.Response, limit: int) -> None:
    """Read at most `limit` bytes of the answer's body (and drop them)."""
    read = 0
    if limit <= 0:
        return
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read >= limit:
            return
