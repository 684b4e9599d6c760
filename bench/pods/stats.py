"""The pods bench's pure parts: pod cgroup readings, the replica timeline and what it says."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CGROUP = Path("/sys/fs/cgroup")
QOS = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}
"""The kubelet's QoS level under `kubepods` (cgroupfs driver); Guaranteed pods sit at the top."""
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity_bytes(text: str) -> int:
    """A Kubernetes memory quantity (`512Mi`, `1G`, `1e9`, `1048576`) in bytes."""
    m = re.fullmatch(r"([0-9.eE+]+?)([kMGT]i?)?", text.strip())
    if not m:
        raise ValueError(f"not a memory quantity: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2) or ""])


@dataclass(frozen=True)
class CgroupReading:
    """One read of a pod's cgroup: CPU used so far, memory now and the kernel's peak."""

    cpu_s: float
    memory_bytes: int
    working_set_bytes: int
    """Usage less inactive page cache: what the kubelet evicts on and what an OOM is about."""
    peak_bytes: int
    """The kernel's high-water mark (cgroup v2 memory.peak, v1 max_usage_in_bytes; with cache)."""


def pod_dirs(uid: str, qos_class: str, root: Path = CGROUP) -> dict[str, Path]:
    """The pod's cgroup folders, per controller (`memory`, `cpu`): v1 or v2, cgroupfs driver."""
    level = QOS.get(qos_class, "burstable")
    parts = ["kubepods", *([level] if level else []), f"pod{uid}"]
    if (root / "cgroup.controllers").exists():  # v2: one unified tree
        unified = root.joinpath(*parts)
        return {"memory": unified, "cpu": unified}
    return {"memory": root.joinpath("memory", *parts), "cpu": root.joinpath("cpuacct", *parts)}


def _stat(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line.strip())}


def parse_reading(files: dict[str, str]) -> CgroupReading:
    """A reading from the cgroup files' text, v2 names (memory.peak, cpu.stat) or v1
    (memory.max_usage_in_bytes, cpuacct.usage)."""
    mem_stat = _stat(files.get("memory.stat", ""))
    if "cpu.stat" in files:
        cpu_s = _stat(files["cpu.stat"])["usage_usec"] / 1e6
        usage = int(files["memory.current"])
        peak = int(files.get("memory.peak", usage))
        inactive = mem_stat.get("inactive_file", 0)
    else:
        cpu_s = int(files["cpuacct.usage"]) / 1e9
        usage = int(files["memory.usage_in_bytes"])
        peak = int(files["memory.max_usage_in_bytes"])
        inactive = mem_stat.get("total_inactive_file", 0)
    return CgroupReading(cpu_s, usage, max(0, usage - inactive), max(peak, usage))


V1_FILES = {
    "memory": ("memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.stat"),
    "cpu": ("cpuacct.usage",),
}
V2_FILES = {"memory": ("memory.current", "memory.peak", "memory.stat"), "cpu": ("cpu.stat",)}


def read_pod(uid: str, qos_class: str, root: Path = CGROUP) -> CgroupReading | None:
    """The pod's cgroup now, or None once it is gone (or not there yet)."""
    dirs = pod_dirs(uid, qos_class, root)
    names = V2_FILES if (root / "cgroup.controllers").exists() else V1_FILES
    files: dict[str, str] = {}
    try:
        for controller, wanted in names.items():
            for name in wanted:
                path = dirs[controller] / name
                if path.exists() or name != "memory.peak":  # memory.peak: kernel 5.19 on
                    files[name] = path.read_text()
    except OSError:
        return None
    return parse_reading(files)


@dataclass
class PodRecord:
    """One pod over the run: its limit, the highest memory seen, CPU at the start and last seen."""

    name: str
    component: str
    limit_bytes: int | None
    cpu_first_s: float | None = None
    """CPU at the first reading: the baseline for pods that were already running."""
    cpu_last_s: float = 0.0
    cpu_completed_s: float | None = None
    """CPU at the tick that saw the batch COMPLETED (None until then)."""
    peak_bytes: int = 0
    peak_working_set_bytes: int = 0
    oom_killed: bool = False
    restarts: int = 0

    def see(self, reading: CgroupReading, baseline: bool) -> None:
        if self.cpu_first_s is None:
            self.cpu_first_s = reading.cpu_s if baseline else 0.0
        self.cpu_last_s = reading.cpu_s
        self.peak_bytes = max(self.peak_bytes, reading.peak_bytes)
        self.peak_working_set_bytes = max(self.peak_working_set_bytes, reading.working_set_bytes)

    def mark_completed(self) -> None:
        """The batch is COMPLETED: what the pod used so far is the batch's, the rest is tail."""
        if self.cpu_completed_s is None:
            self.cpu_completed_s = self.cpu_last_s

    @property
    def cpu_s(self) -> float:
        """CPU this pod spent during the run (all of it for a pod started during the run)."""
        return self.cpu_last_s - (self.cpu_first_s or 0.0)

    @property
    def cpu_to_completed_s(self) -> float:
        """CPU this pod spent from the start of the upload to COMPLETED: what the batch cost it,
        without the idle tail and the scale-down that follow."""
        end = self.cpu_last_s if self.cpu_completed_s is None else self.cpu_completed_s
        return end - (self.cpu_first_s or 0.0)


def pod_facts(pod: dict[str, Any]) -> dict[str, Any]:
    """What the bench needs of a pod object: name, uid, component, QoS, memory limit (the sum
    of its containers'), OOMKilled, restarts, terminating."""
    spec, status = pod.get("spec", {}), pod.get("status", {})
    limits = [c.get("resources", {}).get("limits", {}).get("memory") for c in spec["containers"]]
    statuses = status.get("containerStatuses", [])
    reasons = {
        s.get(when, {}).get("terminated", {}).get("reason")
        for s in statuses
        for when in ("state", "lastState")
    }
    meta = pod["metadata"]
    return {
        "name": meta["name"],
        "uid": meta["uid"],
        "component": meta.get("labels", {}).get("app.kubernetes.io/component", "?"),
        "qos": status.get("qosClass", "Burstable"),
        "limit_bytes": sum(quantity_bytes(x) for x in limits) if all(limits) else None,
        "oom_killed": "OOMKilled" in reasons,
        "restarts": sum(int(s.get("restartCount", 0)) for s in statuses),
        "terminating": bool(meta.get("deletionTimestamp")),
    }


@dataclass(frozen=True)
class Point:
    """One tick of the timeline, `t_s` from the start of the upload."""

    t_s: float
    desired: int
    """The worker Deployment's spec.replicas: what the operator asked for."""
    ready: int
    pods: int
    """Worker pods that exist and are not terminating."""
    queue: int
    """The backlog as the operator counts it: ready jobs in the queue plus pending fair work."""
    processed: int
    linked: int


@dataclass
class Timeline:
    """The points of one run, with the upload's end and the batch's completion marked."""

    points: list[Point] = field(default_factory=list)
    uploaded_s: float | None = None
    completed_s: float | None = None

    def first(self, test: Any, after_s: float = 0.0) -> float | None:
        return next((p.t_s for p in self.points if p.t_s >= after_s and test(p)), None)

    def summary(self) -> dict[str, Any]:
        """Scale-up reaction, the peak, and the return to zero, each in seconds."""
        start = self.uploaded_s or 0.0
        decided = self.first(lambda p: p.desired > 0, start)
        first_ready = self.first(lambda p: p.ready > 0)
        first_processed = self.first(lambda p: p.processed > 0)
        ready = self.first(lambda p: p.ready > 0, start)
        most = max((p.desired for p in self.points), default=0)
        at_most = self.first(lambda p: p.desired == most and most > 0, start)
        done = self.completed_s
        zero = None if done is None else self.first(lambda p: p.desired == 0, done)
        gone = None if done is None else self.first(lambda p: p.desired == 0 and p.pods == 0, done)

        def since(t: float | None, origin: float | None) -> float | None:
            return None if t is None or origin is None else round(t - origin, 2)

        return {
            "upload_s": since(self.uploaded_s, 0.0),
            "scale_up_decided_after_upload_s": since(decided, start),
            "first_worker_ready_after_upload_s": since(ready, start),
            "max_replicas": most,
            "max_replicas_after_upload_s": since(at_most, start),
            "first_worker_ready_s": since(first_ready, 0.0),
            "first_processed_s": since(first_processed, 0.0),
            "completed_s": since(done, 0.0),
            "first_to_last_pdf_s": since(done, first_processed),
            "scaled_to_zero_after_completed_s": since(zero, done),
            "last_worker_gone_after_completed_s": since(gone, done),
            "replica_changes": self.changes(),
        }

    def changes(self) -> list[dict[str, Any]]:
        """Every change of desired or ready replicas: the timeline in short."""
        out: list[dict[str, Any]] = []
        last: tuple[int, int] | None = None
        for p in self.points:
            if (p.desired, p.ready) != last:
                out.append({"t_s": p.t_s, "desired": p.desired, "ready": p.ready})
                last = (p.desired, p.ready)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "uploaded_s": self.uploaded_s,
            "completed_s": self.completed_s,
            "points": [asdict(p) for p in self.points],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Timeline:
        return cls(
            [Point(**p) for p in data["points"]], data.get("uploaded_s"), data.get("completed_s")
        )


def pods_report(records: list[PodRecord], linked: int) -> dict[str, Any]:
    """Per pod: peak memory against its limit; CPU per linked PDF, per component and in all.

    The headline CPU runs from the start of the upload to the tick that saw COMPLETED, as the
    local run's does; `..._with_tail` adds what the pods spent after it (idle workers until the
    operator scales them in, and their shutdown)."""
    mb = 2**20
    # a finished Job's pod (the migration) was never read: nothing to say of it
    records = [r for r in records if r.cpu_first_s is not None or r.oom_killed]
    pods = [
        {
            "name": r.name,
            "component": r.component,
            "peak_mb": round(r.peak_bytes / mb, 1),
            "peak_working_set_mb": round(r.peak_working_set_bytes / mb, 1),
            "limit_mb": None if r.limit_bytes is None else round(r.limit_bytes / mb),
            "peak_of_limit": None if not r.limit_bytes else round(r.peak_bytes / r.limit_bytes, 3),
            "cpu_to_completed_s": round(r.cpu_to_completed_s, 2),
            "cpu_s": round(r.cpu_s, 2),
            "oom_killed": r.oom_killed,
            "restarts": r.restarts,
        }
        for r in sorted(records, key=lambda r: (r.component, r.name))
    ]
    ms_per_pdf = 1000 / max(linked, 1)

    def by_component(cpu: Callable[[PodRecord], float]) -> dict[str, float]:
        seconds: dict[str, float] = {}
        for r in records:
            seconds[r.component] = seconds.get(r.component, 0.0) + cpu(r)
        return {k: round(v * ms_per_pdf, 3) for k, v in sorted(seconds.items())}

    def total(cpu: Callable[[PodRecord], float]) -> float:
        return round(sum(cpu(r) for r in records) * ms_per_pdf, 3)

    def batch(r: PodRecord) -> float:
        return r.cpu_to_completed_s

    def whole(r: PodRecord) -> float:
        return r.cpu_s

    return {
        "pods": pods,
        "oom_killed": sorted(r.name for r in records if r.oom_killed),
        "cpu_ms_per_linked_pdf": total(batch),
        "cpu_ms_per_linked_pdf_by_component": by_component(batch),
        "cpu_ms_per_linked_pdf_with_tail": total(whole),
        "cpu_ms_per_linked_pdf_with_tail_by_component": by_component(whole),
    }
