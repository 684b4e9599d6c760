"""The local run's CPU group: weighted as the node's pods are, on cgroups v1 or v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pods.cpugroup import pods_weight


def test_on_cgroups_v1_the_weight_is_kubepods_cpu_shares(tmp_path: Path) -> None:
    (tmp_path / "cpu/kubepods").mkdir(parents=True)
    (tmp_path / "cpu/kubepods/cpu.shares").write_text("2048\n")
    assert pods_weight(tmp_path) == (tmp_path / "cpu", "cpu.shares", 2048)


def test_on_cgroups_v2_the_weight_is_kubepods_cpu_weight(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    (tmp_path / "kubepods").mkdir()
    (tmp_path / "kubepods/cpu.weight").write_text("79\n")
    assert pods_weight(tmp_path) == (tmp_path, "cpu.weight", 79)


def test_without_a_node_there_is_no_weight_to_copy(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    with pytest.raises(SystemExit, match="is the real node up"):
        pods_weight(tmp_path)
