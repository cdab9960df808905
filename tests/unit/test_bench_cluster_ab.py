"""bench/cluster_ab.py's summary: each revision's ratio to the native run beside it, per repetition."""

from __future__ import annotations

from typing import Any

from .bench_modules import bench_module

ab = bench_module("cluster_ab")


def _run(revision: str, rep: int, config: str, rate: float, **more: Any) -> dict[str, Any]:
    return {"workload": "W5", "revision": revision, "ab_rep": rep, "config": config, "pair": ["Q", "N"],
            "gangs_per_minute": rate, **more}


def test_each_revision_is_set_against_the_native_run_of_its_repetition() -> None:
    rows = [_run("a", 0, "Q", 240.0, quorum_cpu_ms_per_pod=3.8281249999999996), _run("a", 0, "N", 200.0),
            _run("a", 1, "Q", 150.0, quorum_cpu_ms_per_pod=4.0), _run("a", 1, "N", 200.0)]
    table = ab.summary(rows)
    assert table[2].startswith("| W5 | a | 1.200, 0.750 | 0.975 | 3.83, 4.00 | None, None |")
