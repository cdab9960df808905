"""bench/mb_pod_life.py: the benchmark follows whole lives, and says so when something is left."""

from __future__ import annotations

import pytest

from .bench_modules import bench_module

life = bench_module("mb_pod_life")


def test_every_member_is_placed_bound_and_forgotten() -> None:
    placed, lived = life.measure(gangs=3, size=4, profile=False)  # raises when a gang is left behind
    assert placed > 0 and lived > 0


def test_the_life_ends_with_the_members_deleted() -> None:
    run = life.Run(1, 2)
    events = run.events(run.gangs[0])
    assert [kind for kind, _ in events] == ["upsert"] * 8 + ["delete"] * 2
    phases = [obj["status"].get("phase") for _, obj in events[:8:2]]
    assert phases == ["Pending", "Running", "Running", "Succeeded"]


def test_a_gang_left_behind_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(life.Run, "live", lambda self, events: None)  # the watch never shows the lives
    with pytest.raises(RuntimeError, match="gangs left behind"):
        life.measure(gangs=1, size=2, profile=False)
