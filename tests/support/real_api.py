"""`pdfqueue api` as its own process on a loopback port, its memory read from /proc."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from pdfqueue.domain.settings import Settings
from pdfqueue_dev.processes import Child, free_port, wait_http
from tests.support.helpers import settings_env


class RealApi:
    """`pdfqueue api` as the chart runs it, on a loopback port of its own."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.port = free_port()
        pdfqueue = Path(sys.executable).with_name("pdfqueue")
        argv = [str(pdfqueue), "api", "--port", str(self.port)]
        self.child = Child("api", argv, settings_env(settings), log_dir)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_http(f"{self.url}/healthz", [self.child])

    def rss_kib(self) -> int:
        """VmRSS of the API process, from /proc."""
        for line in Path(f"/proc/{self.child.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)
