"""uvicorn's httptools protocol with bounds on a request's head: size, header count, time.

httptools (llhttp) has no limit of its own: it gathers a header of any size by repeated
`bytes +=` (quadratic), before any of the protocol's callbacks sees it, so one unauthenticated
48 MiB header used to cost ~100 MB and seconds of the event loop. Here the head's bytes are
counted as they arrive, before the parser is fed them: past `max_head_bytes` (or
`max_headers` headers, or a URL over `max_url_bytes`) the client gets 431 (414 for the URL)
and the connection is closed, before any body is read and before the app (auth included)
sees the request. A head that is not complete `head_timeout_s` after the connection (or the
previous response) is ready for it gets 408: a slowloris trickle holds its connection for
that long at most. Connections over `max_connections` get uvicorn's 503 (health probes
excepted), and past that plus PROBE_RESERVE new connections are closed as they come.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from pdfqueue.domain.errors import PdfQueueError
from pdfqueue.domain.settings import Settings
from pdfqueue_api.security_headers import security_headers

log = logging.getLogger(__name__)
PROBES = frozenset({b"/healthz", b"/readyz"})
"""Answered even over the connection limit: a busy API must not be restarted for it."""
PROBE_RESERVE = 32
"""Connections accepted beyond `max_connections`, so that probes still get in."""
LINGER_S = 2.0
"""After a refusal, how long the rest of the client's head is read and dropped: closing at
once, with its bytes unread, would reset the connection and lose the answer."""


@dataclass(frozen=True)
class HttpLimits:
    """What one request's head may be, and how many connections one process keeps."""

    max_head_bytes: int
    max_url_bytes: int
    max_headers: int
    head_timeout_s: float
    max_connections: int

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_head_bytes=settings.http_max_head_bytes,
            max_url_bytes=settings.http_max_url_bytes,
            max_headers=settings.http_max_headers,
            head_timeout_s=settings.http_head_timeout_s,
            max_connections=settings.http_max_connections,
        )


class HeadRefused(PdfQueueError):
    """Raised in a parser callback to stop parsing a head over a limit at once."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """One connection; see the module docstring. `limits` is set by `protocol_class`."""

    limits: ClassVar[HttpLimits]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.in_head = True
        """Between requests or inside a head: what arrives now is counted."""
        self.head_bytes = 0
        self.url_bytes = 0
        self.header_count = 0
        self.refused = False
        self.refusal: HeadRefused | None = None
        self.head_deadline: asyncio.TimerHandle | None = None

    # --- connection ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections + PROBE_RESERVE:
            log.warning("connection limit reached: a new connection is closed")
            transport.abort()
            return
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # lingering: the rest of a refused head is read and dropped
        while data and self.in_head:
            room = self.limits.max_head_bytes - self.head_bytes
            if room <= 0:
                self._refuse(431, f"the request head is over {self.limits.max_head_bytes} bytes")
                return
            piece, data = data[:room], data[room:]
            self.head_bytes += len(piece)
            self._feed(piece)
            if self.refused or self.transport.is_closing():
                return
        if data:
            # The body; a pipelined request's head in the same read goes uncounted (one
            # read, 256 KiB at most), the reads after it are counted again.
            self._feed(data)

    def _feed(self, data: bytes) -> None:
        """uvicorn's own `data_received`, telling our refusals from malformed requests."""
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            # httptools wraps an exception of a callback: HeadRefused is one of our limits
            if self.refusal is not None:
                self._refuse(self.refusal.status, self.refusal.detail)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)

    # --- parser callbacks -----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.url_bytes = 0
        self.header_count = 0

    def on_url(self, url: bytes) -> None:
        self.url_bytes += len(url)
        if self.url_bytes > self.limits.max_url_bytes:
            self._stop(414, f"the URL is over {self.limits.max_url_bytes} bytes")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > self.limits.max_headers:
            self._stop(431, f"the request has over {self.limits.max_headers} headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._disarm_deadline()
        if self.url.split(b"?", 1)[0] in PROBES:
            limit, self.limit_concurrency = self.limit_concurrency, None
            try:
                super().on_headers_complete()
            finally:
                self.limit_concurrency = limit
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True
        self.head_bytes = 0

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.in_head and not self.transport.is_closing():
            self._arm_deadline()  # the next request's head, from now

    # --- limits ---------------------------------------------------------------------------------

    def _stop(self, status: int, detail: str) -> None:
        self.refusal = HeadRefused(status, detail)
        raise self.refusal

    def _arm_deadline(self) -> None:
        self._disarm_deadline()
        self.head_deadline = self.loop.call_later(self.limits.head_timeout_s, self._head_late)

    def _disarm_deadline(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _head_late(self) -> None:
        self.head_deadline = None
        if self.transport.is_closing() or not self.in_head:
            return
        if self.head_bytes == 0:
            self.transport.close()  # nothing asked: nothing to answer
            return
        timeout = self.limits.head_timeout_s
        self._refuse(408, f"the request head did not arrive within {timeout:g} s")

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` and close: nothing of this request reaches the app."""
        self.refused = True
        self._disarm_deadline()
        self._unset_keepalive_if_required()
        log.info("refused a request head: %s", detail)
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a response is on the wire: no room for another
            return
        body = json.dumps({"detail": detail}).encode()
        headers = [
            *self.server_state.default_headers,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *(
                (k.lower().encode(), v.encode())
                for k, v in security_headers("application/json").items()
            ),
        ]
        head = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        self.transport.write(STATUS_LINE[status] + head + b"\r\n" + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def protocol_class(limits: HttpLimits) -> type[BoundedHttpToolsProtocol]:
    """The protocol uvicorn builds per connection, bound to `limits`."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"limits": limits})
