"""Hostile clients at the front door (issue 36 part A), against the real `pdfqueue api`.

Every byte a connection receives counts against the phase it belongs to, wherever a read's
boundary falls, and every phase has a deadline: a slow or silent client never holds a
connection past one. No token is needed for any of these.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import wait_until
from tests.security.test_sec_api_limits import RealApi, _zip, status_of
from tests.support.helpers import ACME, ACME_TOKEN


@pytest.fixture
def real_api(settings: Settings, tmp_path: Path) -> Iterator[RealApi]:
    api = RealApi(settings, tmp_path)
    try:
        yield api
    finally:
        api.child.stop(10)


def read_until_closed(sock: socket.socket, limit_s: float = 30) -> bytes:
    """Everything the server sends on `sock` until it closes it (at most `limit_s`)."""
    sock.settimeout(limit_s)
    received = bytearray()
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            received += chunk
    return bytes(received)


def statuses(answer: bytes) -> list[int]:
    return [int(part[:3]) for part in answer.split(b"HTTP/1.1 ")[1:]]


def is_closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock`; what it sent before is read and dropped."""
    sock.settimeout(0.05)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_head_pipelined_after_a_body_counts_against_the_head_limit(real_api: RealApi) -> None:
    """The body's end and a 40,000-byte head arrive in one read, after the first request
    was answered: the head is counted from its first byte, and refused at 32 KiB."""
    sock = real_api.connect()
    sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\n")
    first = sock.recv(65536)  # answered before its body: the head was a read of its own
    assert status_of(first) == 405
    # over the limit, and small enough to arrive in one read (the whole of it uncounted)
    big = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n"
    with contextlib.suppress(OSError):  # refused mid-send: the server stopped reading
        sock.sendall(b"abcd" + big)
    answer = first + read_until_closed(sock)
    sock.close()
    assert statuses(answer) == [405, 431], answer[:600]
    assert b"the request head is over 32768 bytes" in answer


def test_a_48_mib_trailer_is_refused_and_the_api_stays_small(real_api: RealApi) -> None:
    for _ in range(5):  # warm: the first requests import and allocate what they need
        assert httpx.get(f"{real_api.url}/healthz").status_code == 200
    before = real_api.rss_kib()
    request = (
        b"POST /v1/batches HTTP/1.1\r\nHost: t\r\nContent-Type: application/zip\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n4\r\nPK\x03\x04\r\n0\r\nX-Trailer: "
        + b"t" * (48 << 20)
        + b"\r\n\r\n"
    )
    sock = real_api.connect()
    sender = threading.Thread(target=lambda: _send_all(sock, request), daemon=True)
    sender.start()
    peak = before
    answer = bytearray()
    sock.settimeout(0.05)
    with contextlib.suppress(OSError):
        while True:
            peak = max(peak, real_api.rss_kib())
            with contextlib.suppress(TimeoutError):
                if not (chunk := sock.recv(65536)):
                    break
                answer += chunk
    sender.join(30)
    sock.close()
    grown_mib = (peak - before) / 1024
    print(f"48 MiB trailer: RSS +{grown_mib:.1f} MiB")
    # refused as soon as the trailer is over the limit, after the 401 or before it
    assert statuses(bytes(answer)) in ([401, 431], [431]), bytes(answer[:600])
    assert b"the request's head and trailer are over 32768 bytes" in answer
    assert grown_mib < 8, f"the API grew by {grown_mib:.1f} MiB"


def _send_all(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # refused mid-send: the server stopped reading
        sock.sendall(data)


def test_a_chunked_upload_with_a_small_trailer_is_read(real_api: RealApi) -> None:
    body = _zip()
    sock = real_api.connect()
    sock.sendall(
        b"POST /v1/batches HTTP/1.1\r\nHost: t\r\nContent-Type: application/zip\r\n"
        b"Authorization: Bearer " + ACME_TOKEN.encode() + b"\r\nConnection: close\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\nX-Checksum: 1234\r\n\r\n"
    )
    answer = read_until_closed(sock)
    sock.close()
    assert statuses(answer) == [202], answer[:600]


@pytest.mark.settings(http_idle_timeout_s=1.0, http_head_timeout_s=2.0, http_body_timeout_s=2.0)
@pytest.mark.parametrize(
    ("request_bytes", "then"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", b"G"),
        (b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n", b"x"),
        (b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n", b"x"),
        (b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n", b""),
    ],
    ids=["a head's first byte", "the body's last byte", "half the body", "no body"],
)
def test_a_client_silent_after_its_answer_loses_the_connection(
    real_api: RealApi, request_bytes: bytes, then: bytes
) -> None:
    """Request, read the answer, one more byte (or none), silence: whatever phase that byte
    leaves the connection in (the next head, idle, the rest of the body), its deadline cuts
    it. 24 such connections, as the attacker held 96 of 96 for ever."""
    socks = []
    for _ in range(24):
        sock = real_api.connect()
        sock.sendall(request_bytes)
        assert status_of(sock.recv(65536)) == 200
        sock.sendall(then)
        socks.append(sock)
    try:
        wait_until(lambda: all(is_closed(s) for s in socks), "every connection closed", 30)
    finally:
        for sock in socks:
            sock.close()


def dropped(sock: socket.socket) -> bool:
    """Whether the server has closed or reset `sock`, read from the kernel's TCP state:
    reading to find out would make the client a reader."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != TCP_ESTABLISHED


TCP_ESTABLISHED = 1


def non_readers(api: RealApi, count: int) -> list[socket.socket]:
    """Connections asking for far more answer than the kernel buffers hold, never reading."""
    size = len(httpx.get(f"{api.url}/openapi.json").content)
    asks = b"GET /openapi.json HTTP/1.1\r\nHost: t\r\n\r\n" * ((8 << 20) // size + 1)
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", api.port))
        with contextlib.suppress(OSError):  # over the connection limit: 503 and closed
            sock.sendall(asks)
        socks.append(sock)
    return socks


@pytest.mark.settings(
    http_write_timeout_s=4.0,
    http_max_connections=6,
    http_head_timeout_s=300.0,  # the answers are pipelined requests' (a big report's stand-in):
    http_idle_timeout_s=300.0,  # the reading phases' deadlines must not be what cuts them
)
def test_clients_that_do_not_read_lose_their_connections(real_api: RealApi) -> None:
    """One client opens every connection with answers it never reads; after the write
    deadline they are dropped and another tenant's request is served."""
    # one fewer than the limit: uvicorn counts the connection asking, and answers 503 to
    # a request that arrives with the limit reached (the non-readers' own included)
    socks = non_readers(real_api, 5)
    try:
        with httpx.Client(base_url=real_api.url, timeout=30) as http:
            # the non-readers hold every connection at first
            assert http.get("/v1/batches", headers=ACME).status_code == 503
            wait_until(lambda: all(dropped(s) for s in socks), "non-readers dropped", 30)
            assert http.get("/v1/batches", headers=ACME).status_code == 200
    finally:
        for sock in socks:
            sock.close()


DEADLINES_FAR = {
    "http_idle_timeout_s": 300.0,
    "http_head_timeout_s": 300.0,
    "http_body_timeout_s": 300.0,
    "http_write_timeout_s": 300.0,
}


@pytest.mark.settings(**DEADLINES_FAR)
def test_the_api_stops_promptly_with_attack_connections_open(real_api: RealApi) -> None:
    """SIGTERM with clients in every phase, none of whose deadlines is near: the API still
    exits at once (uvicorn would wait for a client that does not read for ever)."""
    socks = non_readers(real_api, 3)
    for start in (b"", b"GET /healthz HTTP/1.1\r\nHost: t\r\n", b"GET /healthz HTTP/1.1\r\n"):
        sock = real_api.connect()
        sock.sendall(start)
        socks.append(sock)
    stalled = real_api.connect()  # answered, its body never sent
    stalled.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 9\r\n\r\n")
    assert status_of(stalled.recv(65536)) == 200
    socks.append(stalled)
    try:
        real_api.child.proc.send_signal(signal.SIGTERM)
        try:
            code = real_api.child.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the API did not stop within 30 s of SIGTERM")
        # uvicorn re-raises the SIGTERM it handled once it has shut down
        assert code in (0, -signal.SIGTERM), real_api.child.log_tail()
        assert "Finished server process" in real_api.child.log_tail(), real_api.child.log_tail()
    finally:
        for sock in socks:
            sock.close()
