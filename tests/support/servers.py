"""A store server of a test's own (redis-server, versitygw, MinIO...): started on a port,
waited for until it listens, stopped when the test is done."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
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
