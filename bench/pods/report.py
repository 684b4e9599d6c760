"""The pods bench's report: pods against local processes, and the short table on stdout."""

from __future__ import annotations

from typing import Any

GOODPUT_WITHIN = 0.10
"""Pods must link within 10% of the PDFs per second local processes link on the same machine."""


def compare(row: dict[str, Any]) -> dict[str, Any]:
    """One round's pods run over its local run (empty without a local run)."""
    pods, local = row.get("pods"), row.get("local")
    if not pods or not local or not local.get("goodput"):
        return {}
    ratio = pods["goodput"] / local["goodput"]
    out = {
        "pods_over_local_goodput": round(ratio, 3),
        "within_target": ratio >= 1 - GOODPUT_WITHIN,
        "pods_over_local_seconds": round(pods["seconds"] / local["seconds"], 3),
    }
    pods_span = pods.get("scaling", {}).get("first_to_last_pdf_s")
    local_span = local.get("first_to_last_pdf_s")
    if pods_span and local_span:
        # from the first PDF processed to COMPLETED: throughput once a worker runs, without the
        # scale-up from zero that only the pods have
        out["pods_over_local_goodput_first_to_last_pdf"] = round(local_span / pods_span, 3)
    return out


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _row(label: str, pods: object, local: object = "") -> str:
    return f"  {label:<29}{pods!s:<15}{local!s}".rstrip()


def _round(i: int, row: dict[str, Any]) -> list[str]:
    pods, local, cmp = row["pods"], row.get("local") or {}, row.get("comparison") or {}
    sc = pods["scaling"]
    cores = pods.get("machine", {}).get("cores", "?")
    lines = [
        _row(f"round {i} {'/'.join(row.get('order', ['pods']))}", "pods", "local"),
        _row("status", pods["status"], local.get("status", "-")),
        _row("to COMPLETED", _s(pods["seconds"]), _s(local.get("seconds"))),
        _row("goodput (linked/s)", pods["goodput"], local.get("goodput", "-")),
    ]
    if cmp:
        verdict = "within 10%" if cmp["within_target"] else "NOT within 10%"
        lines.append(_row("pods/local goodput", f"{cmp['pods_over_local_goodput']} ({verdict})"))
    lines += [
        _row("first worker Ready", _s(sc.get("first_worker_ready_s")), "(running before)"),
        _row(
            "first PDF processed",
            _s(sc.get("first_processed_s")),
            _s(local.get("first_processed_s")),
        ),
        _row(
            "first to last PDF",
            _s(sc.get("first_to_last_pdf_s")),
            _s(local.get("first_to_last_pdf_s")),
        ),
    ]
    if "pods_over_local_goodput_first_to_last_pdf" in cmp:
        lines.append(
            _row("pods/local, first to last", cmp["pods_over_local_goodput_first_to_last_pdf"])
        )
    lines += [
        _row(
            "CPU per PDF to COMPLETED",
            f"{pods['cpu_ms_per_linked_pdf']} ms",
            f"{local.get('cpu_ms_per_pdf', '-')} ms",
        ),
        _row(
            "  with the pods' idle tail", f"{pods.get('cpu_ms_per_linked_pdf_with_tail', '-')} ms"
        ),
        _row(
            f"machine busy cores (of {cores})",
            pods.get("machine", {}).get("busy_cores", "-"),
            local.get("machine", {}).get("busy_cores", "-"),
        ),
        _row("upload", _s(sc["upload_s"])),
        _row(
            "scale-up decided / ready",
            f"{_s(sc['scale_up_decided_after_upload_s'])} / "
            f"{_s(sc['first_worker_ready_after_upload_s'])} after the upload",
        ),
        _row("max replicas", f"{sc['max_replicas']} at {_s(sc['max_replicas_after_upload_s'])}"),
        _row(
            "back to 0 / last pod gone",
            f"{_s(sc['scaled_to_zero_after_completed_s'])} / "
            f"{_s(sc['last_worker_gone_after_completed_s'])} after COMPLETED",
        ),
        _row("pods' CPU/PDF by component", pods["cpu_ms_per_linked_pdf_by_component"]),
        _row("local CPU/PDF", _local_components(local)),
        _row("OOMKilled", pods["oom_killed"] or "none"),
        "  pod                                   peak MB   limit MB  of limit  CPU s (to done)",
    ]
    for p in pods["pods"]:
        share = "-" if p["peak_of_limit"] is None else f"{100 * p['peak_of_limit']:.0f}%"
        lines.append(
            f"  {p['name'][:36]:<36} {p['peak_mb']:>8} {p['limit_mb'] or '-':>10} "
            f"{share:>9} {p['cpu_s']:>6} ({p.get('cpu_to_completed_s', '-')})"
        )
    return lines


def _local_components(local: dict[str, Any]) -> str:
    """The local run's CPU per PDF by process, named as the pods' components are."""
    if "worker_cpu_ms" not in local:
        return "-"
    parts = {"api": local["api_cpu_ms"], "worker": local["worker_cpu_ms"]}
    parts.update(local.get("services_cpu_ms", {}))
    return str(dict(sorted(parts.items())))


def table(out: dict[str, Any]) -> str:
    """Each round in a few lines: times, goodput, scaling, CPU, and every pod's memory."""
    lines = [line for i, row in enumerate(out["rounds"], 1) for line in _round(i, row)]
    median = out.get("median_pods_over_local_goodput")
    if median is not None:
        lines.append(f"median pods/local goodput over rounds: {median}")
    return "\n".join(lines)
