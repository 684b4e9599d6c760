"""The pods bench's pure parts: cgroup readings, pod facts, the replica timeline and the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.pods.report import compare, table
from bench.pods.stats import (
    PodRecord,
    Point,
    Timeline,
    parse_reading,
    pod_dirs,
    pod_facts,
    pods_report,
    quantity_bytes,
    read_pod,
)

UID = "0b7c1f5e-1111-2222-3333-444455556666"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2Gi", 2 << 30), ("512Mi", 512 << 20), ("1G", 10**9), ("1048576", 1 << 20), ("1e3", 1000)],
)
def test_memory_quantities(text: str, expected: int) -> None:
    assert quantity_bytes(text) == expected


def test_a_cpu_quantity_is_not_memory() -> None:
    with pytest.raises(ValueError, match="not a memory quantity"):
        quantity_bytes("500m")


def _v1_tree(root: Path, level: str, cpu_ns: int, usage: int, peak: int, inactive: int) -> None:
    mem = root / "memory/kubepods" / level / f"pod{UID}"
    cpu = root / "cpuacct/kubepods" / level / f"pod{UID}"
    for d in (mem, cpu):
        d.mkdir(parents=True)
    (mem / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (mem / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    (mem / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {inactive}\ntotal_rss 9\n")
    (cpu / "cpuacct.usage").write_text(f"{cpu_ns}\n")


def test_a_cgroup_v1_pod_is_read_under_its_qos_level(tmp_path: Path) -> None:
    _v1_tree(tmp_path, "burstable", 2_500_000_000, 300 << 20, 400 << 20, 100 << 20)
    reading = read_pod(UID, "Burstable", tmp_path)
    assert reading is not None
    assert reading.cpu_s == pytest.approx(2.5)
    assert reading.memory_bytes == 300 << 20
    assert reading.working_set_bytes == 200 << 20  # less the inactive page cache
    assert reading.peak_bytes == 400 << 20


def test_a_guaranteed_pod_sits_at_the_top_of_kubepods(tmp_path: Path) -> None:
    dirs = pod_dirs(UID, "Guaranteed", tmp_path)
    assert dirs["memory"] == tmp_path / f"memory/kubepods/pod{UID}"
    assert dirs["cpu"] == tmp_path / f"cpuacct/kubepods/pod{UID}"


def test_a_pod_whose_cgroup_is_gone_reads_as_none(tmp_path: Path) -> None:
    assert read_pod(UID, "BestEffort", tmp_path) is None


def test_a_cgroup_v2_pod_is_read_from_the_unified_tree(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    pod = tmp_path / f"kubepods/besteffort/pod{UID}"
    pod.mkdir(parents=True)
    (pod / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    (pod / "memory.current").write_text(f"{50 << 20}\n")
    (pod / "memory.peak").write_text(f"{80 << 20}\n")
    (pod / "memory.stat").write_text(f"anon 1\ninactive_file {10 << 20}\n")
    reading = read_pod(UID, "BestEffort", tmp_path)
    assert reading is not None
    assert (reading.cpu_s, reading.working_set_bytes, reading.peak_bytes) == (
        1.5,
        40 << 20,
        80 << 20,
    )


def test_without_memory_peak_the_usage_is_the_peak_seen() -> None:
    reading = parse_reading(
        {"cpu.stat": "usage_usec 1\n", "memory.current": "7", "memory.stat": ""}
    )
    assert reading.peak_bytes == 7


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "pdfqueue-worker-abc",
            "uid": UID,
            "labels": {"app.kubernetes.io/component": "worker"},
        },
        "spec": {
            "containers": [
                {"resources": {"limits": {"memory": "2Gi"}}},
                {"resources": {"limits": {"memory": "64Mi"}}},
            ]
        },
        "status": {"qosClass": "Burstable", **status},
    }


def test_pod_facts_see_an_oom_kill_in_the_last_state_and_sum_the_limits() -> None:
    facts = pod_facts(
        _pod(
            containerStatuses=[
                {"restartCount": 1, "lastState": {"terminated": {"reason": "OOMKilled"}}},
                {"restartCount": 0, "state": {"running": {}}},
            ]
        )
    )
    assert facts["oom_killed"] is True
    assert facts["restarts"] == 1
    assert facts["limit_bytes"] == (2 << 30) + (64 << 20)
    assert facts["component"] == "worker"
    assert facts["terminating"] is False


def test_a_container_without_a_limit_leaves_the_pod_without_one() -> None:
    pod = _pod()
    pod["spec"]["containers"][1]["resources"] = {}
    facts = pod_facts(pod)
    assert facts["limit_bytes"] is None
    assert facts["oom_killed"] is False


def _timeline() -> Timeline:
    rows = [
        (0.0, 0, 0, 0, 0, 0),
        (0.5, 0, 0, 0, 1, 0),  # the upload ends at 0.8
        (1.0, 0, 0, 0, 1, 0),
        (1.5, 1, 0, 1, 90, 0),  # the operator decides
        (2.5, 1, 1, 1, 90, 0),
        (4.0, 2, 1, 2, 80, 100),
        (5.0, 2, 2, 2, 40, 1500),
        (9.0, 2, 2, 2, 0, 3000),  # COMPLETED
        (19.0, 1, 1, 2, 0, 3000),
        (24.0, 0, 0, 1, 0, 3000),
        (26.0, 0, 0, 0, 0, 3000),
    ]
    points = [Point(t, d, r, p, q, linked, linked) for t, d, r, p, q, linked in rows]
    return Timeline(points, uploaded_s=0.8, completed_s=9.0)


def test_the_timeline_summary_reads_the_scale_up_and_the_return_to_zero() -> None:
    summary = _timeline().summary()
    assert summary["upload_s"] == 0.8
    assert summary["scale_up_decided_after_upload_s"] == 0.7
    assert summary["first_worker_ready_after_upload_s"] == 1.7
    assert summary["max_replicas"] == 2
    assert summary["max_replicas_after_upload_s"] == 3.2
    assert summary["completed_s"] == 9.0
    assert summary["first_worker_ready_s"] == 2.5  # from the start of the upload
    assert summary["first_processed_s"] == 4.0
    assert summary["first_to_last_pdf_s"] == 5.0
    assert summary["scaled_to_zero_after_completed_s"] == 15.0
    assert summary["last_worker_gone_after_completed_s"] == 17.0


def test_the_replica_changes_are_the_timeline_in_short() -> None:
    changes = [(c["t_s"], c["desired"], c["ready"]) for c in _timeline().changes()]
    assert changes == [
        (0.0, 0, 0),
        (1.5, 1, 0),
        (2.5, 1, 1),
        (4.0, 2, 1),
        (5.0, 2, 2),
        (19.0, 1, 1),
        (24.0, 0, 0),
    ]


def test_a_batch_never_completed_has_no_return_to_zero() -> None:
    timeline = _timeline()
    timeline.completed_s = None
    summary = timeline.summary()
    assert summary["scaled_to_zero_after_completed_s"] is None
    assert summary["last_worker_gone_after_completed_s"] is None


def test_the_timeline_survives_its_json() -> None:
    timeline = _timeline()
    again = Timeline.from_json(timeline.to_json())
    assert again == timeline


def _record(name: str, component: str, cpu: tuple[float, float], peak_mb: int) -> PodRecord:
    record = PodRecord(name, component, 1024 << 20, cpu_first_s=cpu[0], cpu_last_s=cpu[1])
    record.peak_bytes = peak_mb << 20
    return record


def test_the_pods_report_sums_cpu_per_linked_pdf_and_names_oom_kills() -> None:
    api = _record("api-1", "api", (10.0, 12.0), 100)
    worker = _record("worker-1", "worker", (0.0, 6.0), 512)
    worker.oom_killed = True
    never_read = PodRecord("migrate-1", "migrate", None)
    report = pods_report([worker, api, never_read], linked=2000)
    assert report["cpu_ms_per_linked_pdf"] == 4.0  # (2 + 6) s over 2,000 PDFs
    assert report["cpu_ms_per_linked_pdf_by_component"] == {"api": 1.0, "worker": 3.0}
    assert report["cpu_ms_per_linked_pdf_with_tail"] == 4.0  # never marked: no tail known
    assert report["oom_killed"] == ["worker-1"]
    assert [p["name"] for p in report["pods"]] == ["api-1", "worker-1"]
    assert report["pods"][1]["peak_of_limit"] == 0.5


def _reading(cpu_s: float) -> Any:
    return parse_reading(
        {
            "cpuacct.usage": str(int(cpu_s * 1e9)),
            "memory.usage_in_bytes": "10",
            "memory.max_usage_in_bytes": "20",
        }
    )


def test_the_cpu_per_pdf_stops_at_completed_and_the_tail_is_apart() -> None:
    api, worker = PodRecord("api-1", "api", None), PodRecord("worker-1", "worker", None)
    api.see(_reading(10.0), baseline=True)  # running before the upload: only its CPU since
    worker.see(_reading(1.0), baseline=False)  # started during the run: all of it
    api.see(_reading(11.0), baseline=False)
    worker.see(_reading(7.0), baseline=False)
    for record in (api, worker):
        record.mark_completed()
    api.see(_reading(11.5), baseline=False)  # the idle tail until the workers are back at 0
    worker.see(_reading(9.0), baseline=False)
    worker.mark_completed()  # a later tick changes nothing
    assert (api.cpu_to_completed_s, worker.cpu_to_completed_s) == (1.0, 7.0)
    assert (api.cpu_s, worker.cpu_s) == (1.5, 9.0)
    report = pods_report([api, worker], linked=1000)
    assert report["cpu_ms_per_linked_pdf"] == 8.0
    assert report["cpu_ms_per_linked_pdf_by_component"] == {"api": 1.0, "worker": 7.0}
    assert report["cpu_ms_per_linked_pdf_with_tail"] == 10.5
    assert report["cpu_ms_per_linked_pdf_with_tail_by_component"] == {"api": 1.5, "worker": 9.0}
    assert [p["cpu_to_completed_s"] for p in report["pods"]] == [1.0, 7.0]


def test_a_pod_seen_first_mid_run_counts_all_its_cpu() -> None:
    baseline = PodRecord("api", "api", None)
    started = PodRecord("worker", "worker", None)
    reading = parse_reading(
        {
            "cpuacct.usage": "3000000000",
            "memory.usage_in_bytes": "10",
            "memory.max_usage_in_bytes": "20",
        }
    )
    baseline.see(reading, baseline=True)
    started.see(reading, baseline=False)
    assert (baseline.cpu_s, started.cpu_s) == (0.0, 3.0)


def _round(pods_goodput: float, local_goodput: float) -> dict[str, Any]:
    pods = {
        "status": "COMPLETED",
        "seconds": 10.0,
        "goodput": pods_goodput,
        "scaling": _timeline().summary(),
        **pods_report([_record("worker-1", "worker", (0.0, 6.0), 512)], linked=3000),
    }
    local = {"status": "COMPLETED", "seconds": 9.0, "goodput": local_goodput}
    row = {"pods": pods, "local": local}
    return {**row, "comparison": compare(row)}


def test_the_comparison_holds_pods_to_ten_percent_of_local_processes() -> None:
    assert _round(91.0, 100.0)["comparison"]["within_target"] is True
    assert _round(89.0, 100.0)["comparison"]["within_target"] is False
    assert compare({"pods": {"goodput": 1.0}}) == {}


def test_the_comparison_also_sets_the_first_to_last_pdf_side_by_side() -> None:
    row = _round(89.0, 100.0)
    row["local"]["first_to_last_pdf_s"] = 4.0  # the pods' timeline: 5.0 s from first to last
    assert compare(row)["pods_over_local_goodput_first_to_last_pdf"] == 0.8
    assert "pods_over_local_goodput_first_to_last_pdf" not in row["comparison"]  # not measured


def test_the_table_shows_each_round_and_its_pods() -> None:
    text = table({"rounds": [_round(89.0, 100.0)], "median_pods_over_local_goodput": 0.89})
    assert "NOT within 10%" in text
    assert "worker-1" in text
    assert "50%" in text
    assert "median pods/local goodput over rounds: 0.89" in text
