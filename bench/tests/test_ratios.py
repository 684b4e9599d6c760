"""The bench's ratios: per corpus, the median over paired rounds, each against its own peer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import peer, report


def _pair(round_: int, mine: float, peer: float, cpu: float) -> list[dict[str, Any]]:
    peer_run = {"system": "seed-node", "files": 300, "density": "typical", "goodput": peer}
    peer_run |= {"pdfs_per_s": peer, "failed": 3, "skipped_no_match": 9, "round": round_}
    run: dict[str, Any] = {"system": "pdfqueue", "files": 300, "density": "typical", "workers": 1}
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


def test_each_peer_round_reads_its_own_result_line(tmp_path: Path) -> None:
    """The peer's log is one per corpus and appended to: round 2 must read round 2's line,
    or every round is paired with the first round's peer."""
    log = tmp_path / "peer-typical-3000.log"
    rounds = []
    for seconds in (12.2, 14.8):
        offset = peer.log_size(log)
        with log.open("a") as f:
            f.write(f'npm notice\n{{"peer": "seed-node", "seconds": {seconds}}}\n')
        rounds.append(peer.result_line(log, offset))
    assert [json.loads(line or "{}")["seconds"] for line in rounds] == [12.2, 14.8]
    assert peer.result_line(log, peer.log_size(log)) is None  # a run that printed nothing
