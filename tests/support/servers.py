"""Servers of a test's own: a store (redis-server, versitygw, MinIO...) started on a port,
waited for until it listens and stopped when the test is done; and small JSON endpoints."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pdfqueue_dev.processes import wait_until


def listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def serving(
    argv: list[str], port: int, log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` until the block ends; it has started once 127.0.0.1:`port` accepts."""
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(
            lambda: proc.poll() is None and listening(port),
            f"{argv[0]} on port {port}",
            timeout_s=30,
            diagnostics=lambda: log.read_text(errors="replace")[-2000:],
        )
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


Answer = Callable[[str, Mapping[str, str]], tuple[int, bytes]]
"""(path, request headers) -> (status, JSON body) of a GET."""


@contextlib.contextmanager
def json_server(
    answer: Answer, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None
) -> Iterator[str]:
    """An HTTP server in a thread answering each GET with `answer`'s JSON; its base URL
    (`https://` with `tls`). The stand-in of a credentials endpoint or an issuer's keys."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answer(self.path, self.headers)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
