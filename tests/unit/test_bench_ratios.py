"""The bench's ratios: per corpus, the median over paired rounds, each against its own peer."""

from __future__ import annotations

from typing import Any

from bench import report


def _pair(round_: int, mine: float, peer: float, cpu: float) -> list[dict[str, Any]]:
    peer_run = {"system": "seed-node", "files": 300, "density": "typical", "goodput": peer}
    peer_run |= {"pdfs_per_s": peer, "failed": 3, "skipped_no_match": 9, "round": round_}
    run = {"system": "pdfqueue", "files": 300, "density": "typical", "workers": 1}
    run |= {"extract_processes": 2, "goodput": mine, "pdfs_per_s": mine, "failed": 0}
    run |= {"cpu_ms_per_linked": cpu, "round": round_}
    run["paired_peer"] = {"goodput": peer, "pdfs_per_s": peer, "failed": 3}
    run["paired_peer"] |= {"skipped_no_match": 9, "cpu_ms_per_linked": 9.0}
    return [peer_run, run]


def test_the_ratio_is_the_median_of_the_rounds_each_against_its_own_peer() -> None:
    runs = _pair(1, 300.0, 100.0, 3.4) + _pair(2, 330.0, 150.0, 3.6) + _pair(3, 280.0, 90.0, 3.3)
    (row,) = report.ratios(runs)
    assert row["goodput_ratio_rounds"] == [3.0, 2.2, 3.11]
    assert row["goodput_ratio"] == 3.0
    assert row["rounds"] == 3
    assert row["goodput"] == 300.0
    assert row["cpu_ms_per_linked"] == 3.4
    assert row["met"]
    assert row["cpu_met"]


def test_one_bad_round_does_not_carry_the_median_but_a_failure_in_any_round_misses() -> None:
    runs = _pair(1, 300.0, 100.0, 3.4) + _pair(2, 100.0, 100.0, 5.0) + _pair(3, 310.0, 100.0, 3.4)
    runs[3]["failed"] = 1
    (row,) = report.ratios(runs)
    assert row["goodput_ratio"] == 3.0
    assert not row["met"]
