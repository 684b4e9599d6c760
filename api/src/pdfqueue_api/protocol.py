"""uvicorn's httptools protocol with a deadline for every phase of a connection and a byte
limit for every part of a request head.

httptools (llhttp) has no limit of its own: it gathers a header of any size by repeated
`bytes +=` (quadratic), before any of the protocol's callbacks sees it, so one unauthenticated
48 MiB header (or trailer field) used to cost ~100 MB and seconds of the event loop. Here every
byte received is counted, before the parser is fed it, against the phase it belongs to:
the parser is fed at most PIECE bytes at a time, so that wherever a read's boundary falls
(a body's end and the next head in one read, a chunked body's trailer) no more than one
piece goes uncounted. A head over `max_head_bytes` (or `max_headers` headers, or a URL over
`max_url_bytes`) gets 431 (414 for the URL); a chunked body's trailer, with the chunk framing
around it, counts as head bytes. Either way the connection is closed, and nothing of the
request reaches the app (auth included) unless its head was whole and within bounds.

One deadline is always armed for the phase the connection is in:
- ready (no byte of a request yet, after the connection or a response): `idle_timeout_s`,
  then the connection is closed unanswered;
- head (from its first byte): `head_timeout_s`, then 408 (a slowloris trickle);
- body (chunk framing and trailer included): within every `body_timeout_s` of waiting for
  the client, `pace.window_bytes`, else 408; while the app still answers, twice that (the
  upload route paces the body it reads itself, with the same settings); the rest of a body
  the app did not read, after the response, at the plain pace;
- writes: while anything waits in the connection's write buffer (the kernel's are full:
  the client does not read), `write_timeout_s`, then the connection is dropped, whether a
  response or the last bytes before a close wait.
Nothing else needs a deadline: while the app works on a request it is the app's time.
Connections over `max_connections` get uvicorn's 503 (health probes excepted), and past that
plus PROBE_RESERVE new connections are closed as they come. At shutdown a connection whose
client does not read is dropped at once (uvicorn would wait for it for ever).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from pdfqueue.domain.errors import PdfQueueError
from pdfqueue.domain.settings import Settings
from pdfqueue_api.security_headers import security_headers
from pdfqueue_api.upload import BodyPace

log = logging.getLogger(__name__)
PROBES = frozenset({b"/healthz", b"/readyz"})
"""Answered even over the connection limit: a busy API must not be restarted for it."""
PROBE_RESERVE = 32
"""Connections accepted beyond `max_connections`, so that probes still get in."""
LINGER_S = 2.0
"""After a refusal, how long the rest of the client's head is read and dropped: closing at
once, with its bytes unread, would reset the connection and lose the answer."""
PIECE = 8192
"""Most bytes fed to the parser at once. Where a piece holds the end of one phase and the
start of the next, its bytes that are not body count in full against the next one's limit:
at most this much is counted early, never anything late."""
ANSWERING_PACE_FACTOR = 2
"""While the app still answers, a body's window is this many times `body_timeout_s`: the
upload route paces what it reads itself, and answers first, with the detail."""


class Phase(enum.Enum):
    """Where a connection is in its current request, as the bytes it received say."""

    READY = "ready"  # no byte of the next request yet
    HEAD = "head"
    BODY = "body"  # chunk framing and trailer included


@dataclass(frozen=True)
class HttpLimits:
    """What one request's head may be, each phase's deadline, and how many connections one
    process keeps."""

    max_head_bytes: int
    max_url_bytes: int
    max_headers: int
    idle_timeout_s: float
    head_timeout_s: float
    pace: BodyPace
    write_timeout_s: float
    max_connections: int

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_head_bytes=settings.http_max_head_bytes,
            max_url_bytes=settings.http_max_url_bytes,
            max_headers=settings.http_max_headers,
            idle_timeout_s=settings.http_idle_timeout_s,
            head_timeout_s=settings.http_head_timeout_s,
            pace=BodyPace.from_settings(settings),
            write_timeout_s=settings.http_write_timeout_s,
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
        self.phase = Phase.READY
        self.head_bytes = 0
        """Bytes of the current request that are not body: head, chunk framing, trailer."""
        self.gap_bytes = 0
        """In the body: bytes since the last body byte (chunk framing, trailer)."""
        self.url_bytes = 0
        self.header_count = 0
        self.piece_body = 0
        self.piece_completed = False
        self.window_bytes = 0
        """Bytes received since the body's current window began."""
        self.refused = False
        self.refusal: HeadRefused | None = None
        self.read_deadline: asyncio.TimerHandle | None = None
        self.write_deadline: asyncio.TimerHandle | None = None
        self.stopping = False

    # --- connection ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections + PROBE_RESERVE:
            log.warning("connection limit reached: a new connection is closed")
            transport.abort()
            return
        # writes pause as soon as anything waits for the client to read (the kernel's
        # buffers are full): the write deadline then runs, for a response and for a close
        # whose last bytes the client never takes alike
        transport.set_write_buffer_limits(high=0)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.write_deadline is not None:
            self.write_deadline.cancel()
            self.write_deadline = None
        super().connection_lost(exc)

    def shutdown(self) -> None:
        super().shutdown()
        self.stopping = True
        if self.flow is not None and self.flow.write_paused:
            self._drop()  # a client that does not read would hold the stop up

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # lingering: the rest of a refused request is read and dropped
        self.window_bytes += len(data)
        if self.phase is Phase.READY:
            self.phase = Phase.HEAD
            self._arm()
        view = memoryview(data)
        while view and not self.refused and not self.transport.is_closing():
            if self.phase is Phase.BODY:
                size = PIECE
            else:
                room = self.limits.max_head_bytes - self.head_bytes
                if room <= 0:
                    self._refuse(
                        431, f"the request head is over {self.limits.max_head_bytes} bytes"
                    )
                    return
                size = min(room, PIECE)
            piece, view = view[:size], view[size:]
            before = self.phase
            self.piece_body, self.piece_completed = 0, False
            self._feed(piece)
            self._count(piece, before)

    def _count(self, piece: memoryview, before: Phase) -> None:
        """Charge what of `piece` was not body to the phase it (at most) belongs to."""
        other = len(piece) - self.piece_body
        if self.piece_completed:
            self.head_bytes, self.gap_bytes = other, 0  # all of it, to the next request
        elif before is Phase.BODY:
            self.gap_bytes = other if self.piece_body else self.gap_bytes + other
        else:
            self.head_bytes += other
        limit = self.limits.max_head_bytes
        if self.phase is Phase.BODY and self.head_bytes + self.gap_bytes > limit:
            self._refuse(431, f"the request's head and trailer are over {limit} bytes")

    def _feed(self, data: memoryview) -> None:
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
        self.header_count += 1  # trailer fields too
        if self.header_count > self.limits.max_headers:
            self._stop(431, f"the request has over {self.limits.max_headers} headers")
        if self.phase is Phase.BODY:
            return  # a trailer field: counted, never added to the request's headers
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.phase = Phase.BODY
        self.gap_bytes = 0
        if self.url.split(b"?", 1)[0] in PROBES:
            limit, self.limit_concurrency = self.limit_concurrency, None
            try:
                super().on_headers_complete()
            finally:
                self.limit_concurrency = limit
        else:
            super().on_headers_complete()
        self._arm()

    def on_body(self, body: bytes) -> None:
        self.piece_body += len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.phase = Phase.READY
        self.piece_completed = True
        self.head_bytes = 0
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the phase's deadline, from now (the app's time is over)

    # --- writes ---------------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.stopping:
            self._drop()  # no client holds the stop up
        elif self.write_deadline is None:
            timeout = self.limits.write_timeout_s
            self.write_deadline = self.loop.call_later(timeout, self._write_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.write_deadline is not None:
            self.write_deadline.cancel()
            self.write_deadline = None

    def _write_late(self) -> None:
        self.write_deadline = None
        timeout = self.limits.write_timeout_s
        log.info("a client read none of its response for %g s: its connection is dropped", timeout)
        self._drop()

    def _drop(self) -> None:
        """Reset the connection: what waits for the client, in the kernel's buffers too, is
        dropped (a plain close would leave the kernel sending it to a client that never
        reads, for minutes)."""
        sock = self.transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    # --- deadlines ------------------------------------------------------------------------------

    def _answering(self) -> bool:
        """Whether the app is still at work on a request of this connection."""
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        """The current phase's deadline, from now."""
        self._disarm()
        if self.phase is Phase.BODY:
            self.window_bytes = 0
            window = self.limits.pace.window_s
            delay = window * ANSWERING_PACE_FACTOR if self._answering() else window
        elif self._answering():
            return  # the request is read; while the app answers, the time is the app's
        elif self.phase is Phase.HEAD:
            delay = self.limits.head_timeout_s
        else:
            delay = self.limits.idle_timeout_s
        self.read_deadline = self.loop.call_later(delay, self._late, self.phase)

    def _disarm(self) -> None:
        if self.read_deadline is not None:
            self.read_deadline.cancel()
            self.read_deadline = None

    def _late(self, phase: Phase) -> None:
        self.read_deadline = None
        if self.transport.is_closing() or self.refused or phase is not self.phase:
            return
        if phase is Phase.READY:
            self.transport.close()  # nothing asked: nothing to answer
        elif phase is Phase.HEAD:
            timeout = self.limits.head_timeout_s
            self._refuse(408, f"the request head did not arrive within {timeout:g} s")
        else:
            self._body_window_over()

    def _body_window_over(self) -> None:
        """A window of the body is over: too slow, or the next window."""
        pace = self.limits.pace
        held_back = self.flow.read_paused or (self._answering() and bool(self.cycle.body))
        if held_back or self.window_bytes >= pace.window_bytes:
            self._arm()  # the client was held back by the app, or kept the pace
            return
        self._refuse(408, str(pace.too_slow(self.window_bytes)))

    # --- refusals -------------------------------------------------------------------------------

    def _stop(self, status: int, detail: str) -> None:
        self.refusal = HeadRefused(status, detail)
        raise self.refusal

    def _refuse(self, status: int, detail: str) -> None:
        """Answer `status` and close: nothing more of this request reaches the app."""
        self.refused = True
        self._disarm()
        self._unset_keepalive_if_required()
        log.info("refused a request: %s", detail)
        if self.cycle is not None and not self.cycle.response_complete:
            if self.cycle.response_started:
                self.transport.close()  # a response is on the wire: no room for another
                return
            self.cycle.disconnected = True  # the app's answer, when it comes, goes nowhere
            self.cycle.message_event.set()
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
