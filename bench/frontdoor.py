"""`python -m bench.frontdoor`: the API's front door under attack, per HTTP server candidate.

Each candidate serves the real app (`create_app`, the shared services) on loopback with the
same limits (head 32 KiB, deadlines of 3 s, 64 connections); the attacks come from
unauthenticated raw sockets, as issue 36 found them, plus the ones tests/security already
holds. Per candidate: which attacks hold, the API's RSS, /healthz latency while a 48 MiB
trailer is sent, and keep-alive GET /healthz requests per second on the healthy path.

Candidates: `own` (`pdfqueue api`: uvicorn with our protocol layer), `h11` (uvicorn's h11
protocol), `hypercorn` and `granian` (when installed), `haproxy` (in front of `own`, when the
binary is there). `--only NAME` runs one; the result goes to bench/results/frontdoor-*.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.report import save, utc_stamp
from pdfqueue_dev.processes import Child, free_port, wait_http

TOKEN = "frontdoor-bench-token-0123456789abcdef0123"
DEADLINE_S = 3.0
SLACK_S = 4.0
"""Past a deadline, how long a shared 2-core machine may take to act on it."""
MAX_HEAD = 32 * 1024
MAX_CONNECTIONS = 64
LIMITS = {
    "PDFQUEUE_HTTP_HEAD_TIMEOUT_S": str(DEADLINE_S),
    "PDFQUEUE_HTTP_IDLE_TIMEOUT_S": str(DEADLINE_S),
    "PDFQUEUE_HTTP_BODY_TIMEOUT_S": str(DEADLINE_S),
    "PDFQUEUE_HTTP_WRITE_TIMEOUT_S": str(DEADLINE_S),
    "PDFQUEUE_HTTP_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
    "PDFQUEUE_HTTP_MAX_HEAD_BYTES": str(MAX_HEAD),
    "PDFQUEUE_API_TOKENS": f"bench:{TOKEN}",
}
HAPROXY_CFG = """
global
    maxconn 4096
defaults
    mode http
    timeout connect 3s
    timeout client {t}s
    timeout server 3600s
    timeout http-request {t}s
    timeout http-keep-alive {t}s
    option http-buffer-request
frontend api
    bind 127.0.0.1:{port}
    maxconn {conns}
    default_backend app
backend app
    server api 127.0.0.1:{inner}
"""


# --- candidates -----------------------------------------------------------------------------


class Server:
    """A candidate serving the app on `port`; `pids` are the processes whose RSS counts."""

    def __init__(self, name: str, log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **LIMITS}
        python = sys.executable
        self.children: list[Child] = []
        if name in ("own", "haproxy"):
            inner = self.port if name == "own" else free_port()
            pdfqueue = str(Path(python).with_name("pdfqueue"))
            argv = [pdfqueue, "api", "--port", str(inner)]
            self.children.append(Child("api", argv, env, log_dir))
            if name == "haproxy":
                cfg = log_dir / "haproxy.cfg"
                t = int(DEADLINE_S)
                conns = MAX_CONNECTIONS
                cfg.write_text(HAPROXY_CFG.format(t=t, port=self.port, inner=inner, conns=conns))
                wait_http(f"http://127.0.0.1:{inner}/healthz", self.children)
                self.children.append(Child("haproxy", ["haproxy", "-f", str(cfg)], env, log_dir))
        else:
            argv = [python, "-m", "bench.frontdoor", "--serve", name, "--port", str(self.port)]
            self.children.append(Child(name, argv, env, log_dir))
        wait_http(f"{self.url}/healthz", self.children)
        self.pids = [pid for c in self.children for pid in (c.pid, *_descendants(c.pid))]

    def rss_kib(self) -> int:
        total = 0
        for pid in self.pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total

    def stop(self) -> float:
        """SIGTERM everything; seconds until all had exited."""
        started = time.monotonic()
        for child in reversed(self.children):
            child.stop(30)
        return time.monotonic() - started


def _descendants(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    kids.append(int(entry.name))
    return kids


def serve(name: str, port: int) -> None:
    """Run candidate `name` (not ours) in this process with the bench's limits."""
    from pdfqueue.domain.settings import Settings
    from pdfqueue_api.app import create_app

    app = create_app(Settings())
    if name == "h11":
        import uvicorn

        uvicorn.run(
            app,
            port=port,
            http="h11",
            h11_max_incomplete_event_size=MAX_HEAD,
            timeout_keep_alive=int(DEADLINE_S),
            limit_concurrency=MAX_CONNECTIONS,
            log_config=None,
            access_log=False,
        )
    elif name == "hypercorn":
        import asyncio

        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.h11_max_incomplete_size = MAX_HEAD
        config.keep_alive_timeout = DEADLINE_S
        config.read_timeout = int(DEADLINE_S)
        config.accesslog = None
        asyncio.run(hypercorn_serve(app, config))
    elif name == "granian":
        from granian.constants import Interfaces
        from granian.http import HTTP1Settings
        from granian.server import Server as Granian

        Granian(
            "bench.frontdoor:granian_app",
            address="127.0.0.1",
            port=port,
            interface=Interfaces.ASGI,
            factory=True,
            http1_settings=HTTP1Settings(
                header_read_timeout=int(DEADLINE_S * 1000), max_buffer_size=MAX_HEAD + 8192
            ),
            backpressure=MAX_CONNECTIONS,
        ).serve()
    else:
        raise SystemExit(f"no candidate {name!r}")


def granian_app() -> Any:
    from pdfqueue.domain.settings import Settings
    from pdfqueue_api.app import create_app

    return create_app(Settings())


# --- raw-socket clients ---------------------------------------------------------------------


def connect(server: Server, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", server.port))
    return sock


def read_all(sock: socket.socket, limit_s: float) -> bytes:
    """Everything the server sends until it closes, or until `limit_s` have passed."""
    sock.settimeout(0.5)
    out = bytearray()
    until = time.monotonic() + limit_s
    with contextlib.suppress(OSError):
        while time.monotonic() < until:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            out += chunk
    return bytes(out)


def statuses(answer: bytes) -> list[int]:
    return [int(part[:3]) for part in answer.split(b"HTTP/1.1 ")[1:] if part[:3].isdigit()]


def closed(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (what it sent before is read and dropped)."""
    sock.settimeout(0.01)
    try:
        while chunk := sock.recv(65536):
            del chunk
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def dropped(sock: socket.socket) -> bool:
    """Whether the server has closed or reset `sock`, from the kernel's TCP state (reading to
    find out would make a non-reader a reader)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0] != 1  # ESTABLISHED


def send_in_background(sock: socket.socket, data: bytes) -> Callable[[], int]:
    """Send `data` from a thread; the returned function waits and says how much went out."""
    sent = [0]

    def run() -> None:
        view = memoryview(data)
        with contextlib.suppress(OSError):
            while sent[0] < len(data):
                sent[0] += sock.send(view[sent[0] : sent[0] + 65536])

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> int:
        thread.join(60)
        return sent[0]

    return join


@contextlib.contextmanager
def probing(server: Server) -> Iterator[dict[str, Any]]:
    """Sample /healthz latency and RSS while the block runs."""
    found: dict[str, Any] = {"latencies_ms": [], "peak_rss_kib": server.rss_kib()}
    stop = threading.Event()

    def run() -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                started = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    http.get("/healthz", headers={"Connection": "close"})
                found["latencies_ms"].append((time.monotonic() - started) * 1000)
                found["peak_rss_kib"] = max(found["peak_rss_kib"], server.rss_kib())
                time.sleep(0.05)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join(30)


# --- attacks ---------------------------------------------------------------------------------


def pipelined_head(server: Server) -> dict[str, Any]:
    """Issue 36.1: a 40,000-byte head in the same read as the end of a body (small enough to
    arrive in one read)."""
    big = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 40_000 + b"\r\n\r\n"
    sock = connect(server)
    sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\n")
    first = sock.recv(65536)  # answered before its body: the head was a read of its own
    with contextlib.suppress(OSError):
        sock.sendall(b"abcd" + big)
    got = statuses(first + read_all(sock, DEADLINE_S + SLACK_S))
    sock.close()
    return {"holds": 200 not in got[1:], "statuses": got}


def trailer(server: Server) -> dict[str, Any]:
    """Issue 36.2: a chunked upload whose trailer carries a 48 MiB field."""
    before = server.rss_kib()
    request = (
        b"POST /v1/batches HTTP/1.1\r\nHost: t\r\nContent-Type: application/zip\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n4\r\nPK\x03\x04\r\n0\r\nX-Trailer: "
        + b"t" * (48 << 20)
        + b"\r\n\r\n"
    )
    sock = connect(server)
    with probing(server) as probe:
        join = send_in_background(sock, request)
        answer = read_all(sock, 30)
        sent = join()
    sock.close()
    grown = (probe["peak_rss_kib"] - before) / 1024
    latencies = probe["latencies_ms"] or [0.0]
    return {
        "holds": grown < 8 and (sent < len(request) or bool({400, 431} & set(statuses(answer)))),
        "statuses": statuses(answer),
        "sent_mib": round(sent / 2**20, 1),
        "rss_growth_mib": round(grown, 1),
        "healthz_ms_p50": round(statistics.median(latencies), 1),
        "healthz_ms_max": round(max(latencies), 1),
    }


def extra_byte(server: Server, first: bytes, name: str) -> dict[str, Any]:
    """Issue 36.3: a request, its answer read, one more byte, then silence; 24 of them."""
    socks = []
    for _ in range(24):
        sock = connect(server)
        sock.sendall(first)
        sock.settimeout(10)
        with contextlib.suppress(OSError):
            sock.recv(65536)
        sock.sendall(b"G")
        socks.append(sock)
    time.sleep(DEADLINE_S * 2 + SLACK_S)
    still = sum(not closed(s) for s in socks)
    for sock in socks:
        sock.close()
    return {"holds": still == 0, "variant": name, "still_open": still, "of": len(socks)}


def no_read(server: Server) -> dict[str, Any]:
    """Issue 36.4: connections that ask for big answers and never read them take every
    connection; another tenant's GET /v1/batches must still be served after the deadline."""
    size = len(httpx.get(f"{server.url}/openapi.json").content)
    count = max(1, (8 << 20) // size)  # more than the kernel buffers of a connection hold
    pipelined = b"GET /openapi.json HTTP/1.1\r\nHost: t\r\n\r\n" * count
    socks = []
    for _ in range(MAX_CONNECTIONS - 1):  # uvicorn counts the asking connection too
        with contextlib.suppress(OSError):
            sock = connect(server, rcvbuf=4096)
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                sock.send(pipelined)
            socks.append(sock)
    time.sleep(DEADLINE_S * 2 + SLACK_S)
    other = httpx.get(
        f"{server.url}/v1/batches", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    still = sum(not dropped(s) for s in socks)
    for sock in socks:
        sock.close()
    ok = other.status_code == 200
    return {"holds": ok, "other_status": other.status_code, "still_open": still, "of": len(socks)}


def slowloris(server: Server) -> dict[str, Any]:
    """Held before: a header every half second, the head never ending."""
    sock = connect(server)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
    started = time.monotonic()
    cut = False
    with contextlib.suppress(OSError):
        while time.monotonic() - started < DEADLINE_S * 2 + SLACK_S:
            sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.5)
            if closed(sock):
                cut = True
                break
    cut = cut or closed(sock)
    sock.close()
    return {"holds": cut, "cut_after_s": round(time.monotonic() - started, 1)}


def huge_header(server: Server) -> dict[str, Any]:
    """Held before: one 48 MiB header."""
    before = server.rss_kib()
    request = b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * (48 << 20)
    sock = connect(server)
    with probing(server) as probe:
        join = send_in_background(sock, request)
        answer = read_all(sock, 30)
        sent = join()
    sock.close()
    grown = (probe["peak_rss_kib"] - before) / 1024
    return {
        "holds": grown < 8 and (sent < len(request) or bool({400, 431} & set(statuses(answer)))),
        "statuses": statuses(answer),
        "rss_growth_mib": round(grown, 1),
    }


def requests_per_s(server: Server, seconds: float = 3.0) -> float:
    """Keep-alive GET /healthz from two raw-socket clients."""
    done = [0, 0]
    until = time.monotonic() + seconds

    def run(i: int) -> None:
        sock = connect(server)
        with contextlib.suppress(OSError):
            while time.monotonic() < until:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                got = b""
                while b"\r\n\r\n" not in got or not got.endswith(b"}"):
                    if not (chunk := sock.recv(65536)):
                        return  # the server closed a keep-alive connection
                    got += chunk
                done[i] += 1
        sock.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return round(sum(done) / seconds, 1)


PLAIN = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
LENGTH = b"GET /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n"
ATTACKS: dict[str, Callable[[Server], dict[str, Any]]] = {
    "pipelined_head": pipelined_head,
    "trailer_48mib": trailer,
    "extra_byte_after_answer": lambda s: extra_byte(s, PLAIN, "no body"),
    "extra_byte_is_the_body": lambda s: extra_byte(s, LENGTH, "answered before its body"),
    "unread_responses": no_read,
    "slowloris_head": slowloris,
    "header_48mib": huge_header,
}


def candidates() -> list[str]:
    names = ["own", "h11"]
    for module in ("hypercorn", "granian"):
        with contextlib.suppress(ImportError):
            __import__(module)
            names.append(module)
    if shutil.which("haproxy"):
        names.append("haproxy")
    return names


def measure(name: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as log_dir:
        server = Server(name, Path(log_dir))
        try:
            for _ in range(5):
                httpx.get(f"{server.url}/healthz")
            out: dict[str, Any] = {"rss_idle_mib": round(server.rss_kib() / 1024, 1)}
            out["requests_per_s"] = requests_per_s(server)
            attacks = {}
            for attack, run in ATTACKS.items():
                try:
                    attacks[attack] = run(server)
                except Exception as exc:  # a candidate that falls over has not held
                    attacks[attack] = {"holds": False, "error": repr(exc)}
                print(name, attack, attacks[attack], flush=True)
            out["attacks"] = attacks
            out["held"] = sum(a["holds"] for a in attacks.values())
            out["of"] = len(attacks)
        finally:
            out["stop_s"] = round(server.stop(), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only these candidates")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    names = args.only or candidates()
    results: dict[str, Any] = {"deadline_s": DEADLINE_S, "max_head_bytes": MAX_HEAD}
    results["candidates"] = {}
    for name in names:
        results["candidates"][name] = measure(name)
    save(f"frontdoor-{utc_stamp()}", results)


if __name__ == "__main__":
    main()
