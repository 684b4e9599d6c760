"""The bench's measurements of child processes: their trees' RSS and CPU, and the services'."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdfqueue_dev.proctree import ProcInfo, descendants, snapshot

PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MB = 1024 * 1024


def listener_pid(port: int) -> int | None:
    """The process listening on 127.0.0.1:`port` (a backing service), from /proc/net/tcp."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes for fd in fds):
                return int(entry)
        except OSError:
            continue
    return None


def filesystem(path: str) -> str:
    """The type of the filesystem holding `path` (its longest mount point in /proc/mounts)."""
    where = os.path.realpath(path)
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        mount = fields[1].replace("\\040", " ")
        inside = where == mount or where.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fields[2]
    return kind


def rss_bytes(pid: int) -> int:
    """VmRSS of one process (statm's resident pages), 0 if it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def machine_busy_s() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat)."""
    parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)  # idle + iowait
    return (sum(parts[:8]) - idle) / TICK


def noise() -> dict[str, float]:
    """The machine's state now: load and busy CPU so far, to say how loud a run's figures are,
    and this bench process's own CPU (its uploads, status reads and sampling)."""
    return {
        "load_1m": os.getloadavg()[0],
        "busy_cpu_s": machine_busy_s(),
        "bench_cpu_s": time.process_time(),
    }


def with_noise(started: dict[str, float], seconds: float) -> dict[str, float]:
    """What the whole machine did since `started` (a `noise()`): its load, and its cores' busy
    share, whoever kept them busy."""
    ended = noise()
    busy = (ended["busy_cpu_s"] - started["busy_cpu_s"]) / max(seconds, 1e-9)
    return {
        "load_1m_start": round(started["load_1m"], 2),
        "load_1m_end": round(ended["load_1m"], 2),
        "busy_cores": round(busy, 2),
        "cores": os.cpu_count() or 1,
        "bench_process_cpu_s": round(ended["bench_cpu_s"] - started["bench_cpu_s"], 2),
    }


@dataclass
class Group:
    """One measured thing: a process tree (the main process and, separately, its children)."""

    name: str
    root: Callable[[], int | None]
    """The root pid, looked up lazily (a `uv run` launcher's child appears a moment later)."""
    peak_rss: int = 0
    peak_main_rss: int = 0
    peak_children: int = 0
    cpu_main_start: float | None = None
    cpu_children_start: float | None = None
    cpu_main: float = 0.0
    cpu_children: float = 0.0


class Sampler:
    """A thread that samples RSS (every `interval_s`) and CPU of named process trees."""

    def __init__(self, interval_s: float = 0.1, services: dict[str, int] | None = None) -> None:
        self.interval_s = interval_s
        self.groups: dict[str, Group] = {}
        self.service_pids = services or {}
        """Backing services by name: the pid listening on their port (the tree is counted)."""
        self.services: dict[str, float] = {}
        self._services_start: dict[str, float] = {}
        self._busy_start = 0.0
        self.machine_busy = 0.0
        self.started = 0.0
        self.elapsed = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def watch(self, name: str, root: Callable[[], int | None]) -> None:
        self.groups[name] = Group(name, root)

    def _tick(self) -> dict[int, ProcInfo]:
        procs = snapshot()
        with self._lock:
            for g in self.groups.values():
                root = g.root()
                if root is None or root not in procs:
                    continue
                tree = descendants(root, procs)
                kids = [p for p in tree if p != root]
                main = rss_bytes(root)
                total = main + sum(rss_bytes(p) for p in kids)
                g.peak_rss = max(g.peak_rss, total)
                g.peak_main_rss = max(g.peak_main_rss, main)
                g.peak_children = max(g.peak_children, len(kids))
                cpu_main = procs[root].own_s
                cpu_kids = sum(procs[p].cpu_s for p in kids) + procs[root].reaped_s
                if g.cpu_main_start is None:
                    g.cpu_main_start, g.cpu_children_start = cpu_main, cpu_kids
                g.cpu_main = cpu_main - g.cpu_main_start
                g.cpu_children = cpu_kids - (g.cpu_children_start or 0.0)
        return procs

    def _services_cpu(self, procs: dict[int, ProcInfo]) -> dict[str, float]:
        return {
            name: sum(procs[p].cpu_s for p in descendants(pid, procs))
            for name, pid in self.service_pids.items()
        }

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._tick()

    def start(self) -> Sampler:
        self.started = time.monotonic()
        self._busy_start = machine_busy_s()
        procs = self._tick()
        self._services_start = self._services_cpu(procs)
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Sampler:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        end = time.monotonic()
        procs = self._tick()
        self.elapsed = end - self.started
        self.machine_busy = machine_busy_s() - self._busy_start
        now = self._services_cpu(procs)
        self.services = {k: now[k] - self._services_start.get(k, 0.0) for k in now}
        return self

    def peak_mb(self, name: str) -> float:
        return self.groups[name].peak_rss / MB

    def current_rss(self, name: str) -> int:
        root = self.groups[name].root()
        if root is None:
            return 0
        procs = snapshot()
        return sum(rss_bytes(p) for p in descendants(root, procs))

    def report(self) -> dict[str, Any]:
        """Peaks in MB and CPU seconds per group, services, and the whole machine."""
        groups = {
            g.name: {
                "peak_rss_mb": round(g.peak_rss / MB, 1),
                "peak_main_rss_mb": round(g.peak_main_rss / MB, 1),
                "children": g.peak_children,
                "cpu_main_s": round(g.cpu_main, 2),
                "cpu_children_s": round(g.cpu_children, 2),
            }
            for g in self.groups.values()
        }
        ours = sum(g.cpu_main + g.cpu_children for g in self.groups.values())
        services = sum(self.services.values())
        return {
            "groups": groups,
            "services_cpu_s": {k: round(v, 2) for k, v in self.services.items()},
            "elapsed_s": round(self.elapsed, 2),
            "machine_busy_cpu_s": round(self.machine_busy, 2),
            "other_cpu_s": round(max(0.0, self.machine_busy - ours - services), 2),
        }
