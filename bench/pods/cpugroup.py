"""The local run's processes in one CPU cgroup weighted as the node's pods are, for the pods bench.

The kubelet puts every pod under one cgroup, `kubepods`, whose CPU weight is the node's
capacity (2 cores: `cpu.shares` 2048, the weight of two ordinary processes). When the machine is
shared, the kernel splits it between `kubepods` as one group and every other process on its
own: the pods get 2 shares against each busy process of another bench, while local processes
competing one by one would get a share each, more the more processes they run. In one cgroup
of `kubepods`' weight, the local processes and the services they use compete with the rest of
the machine as the pods do; on a quiet machine the group changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pdfqueue_dev.proctree import descendants, snapshot

CGROUP = Path("/sys/fs/cgroup")


@dataclass
class CpuGroup:
    """One cgroup under the CPU controller's root (cgroups v1 `cpu`, or v2) with a weight."""

    path: Path
    weight_file: str
    """`cpu.shares` (v1) or `cpu.weight` (v2)."""
    moved: set[int] = field(default_factory=set)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def weight(self) -> int:
        return int((self.path / self.weight_file).read_text())

    def adopt(self, roots: Iterable[int]) -> None:
        """Move each process of `roots`, and every process below it, into the group (the
        processes they start later are born in it)."""
        procs = snapshot()
        for root in roots:
            for pid in descendants(root, procs):
                self._move(self.path, pid)
                self.moved.add(pid)

    def release(self) -> None:
        """Every process moved in goes back to the root group (the services outlive a run)."""
        for pid in (int(x) for x in (self.path / "cgroup.procs").read_text().split()):
            self._move(self.root, pid)
        self.moved.clear()

    @staticmethod
    def _move(group: Path, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            (group / "cgroup.procs").write_text(f"{pid}\n")


def pods_weight(root: Path = CGROUP) -> tuple[Path, str, int]:
    """The CPU controller's root, its weight file, and the weight of `kubepods` there."""
    if (root / "cgroup.controllers").exists():
        base, name = root, "cpu.weight"
    else:
        base, name = root / "cpu", "cpu.shares"
    weight = base / "kubepods" / name
    if not weight.exists():
        raise SystemExit(f"no {weight}: is the real node up?")
    return base, name, int(weight.read_text())


@contextlib.contextmanager
def weighted_like_pods(name: str, root: Path = CGROUP) -> Iterator[CpuGroup]:
    """A fresh CPU cgroup `name` with `kubepods`' weight; emptied and removed afterwards."""
    base, weight_file, weight = pods_weight(root)
    group = CpuGroup(base / name, weight_file)
    group.path.mkdir(exist_ok=True)
    (group.path / weight_file).write_text(f"{weight}\n")
    try:
        yield group
    finally:
        group.release()
        group.path.rmdir()
