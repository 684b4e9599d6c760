"""The machine's process tree from /proc: each process's parent and CPU, and a subtree."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pdfqueue_dev.processes import proc_stats

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    comm: str
    own_s: float
    """utime + stime: this process alone."""
    reaped_s: float
    """cutime + cstime: the children it has waited for (a pool's recycled processes)."""

    @property
    def cpu_s(self) -> float:
        return self.own_s + self.reaped_s


def snapshot() -> dict[int, ProcInfo]:
    """Every process on the machine, from /proc/<pid>/stat."""
    procs: dict[int, ProcInfo] = {}
    for pid, (comm, fields) in proc_stats().items():
        # fields[0] is state (field 3 of stat(5)); utime, stime, cutime, cstime are 14..17
        own = (int(fields[11]) + int(fields[12])) / TICK
        reaped = (int(fields[13]) + int(fields[14])) / TICK
        procs[pid] = ProcInfo(pid, int(fields[1]), comm, own, reaped)
    return procs


def descendants(root: int, procs: dict[int, ProcInfo]) -> list[int]:
    """`root` and everything below it."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            out.append(pid)
            todo.extend(children.get(pid, ()))
    return out
