"""bench/mb_watch.py: its events are what the informer takes, and a short read is an error."""

from __future__ import annotations

import orjson
import pytest

from extender.cluster.records import pod_record

from .bench_modules import bench_module

watch = bench_module("mb_watch")


def test_the_streamed_event_is_a_running_gang_member_of_apiserver_size() -> None:
    line = watch.pod_event(17)
    event = orjson.loads(line)
    assert line.endswith(b"\n") and 3_000 < len(line) < 4_000
    record = pod_record(event["object"], "bench/g1")
    assert (record.node_name, record.holds_capacity) == ("kwok-b0-r0-n17", True)


def test_every_event_is_read_and_a_figure_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert watch.main(["--events", "300", "--rate", "20000"]) == 0
    assert "300 events at" in capsys.readouterr().out


def test_a_watch_that_ends_early_is_reported_not_measured(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    async def short(url: str) -> tuple[int, float, float]:
        return 10, 0.1, 0.1
    monkeypatch.setattr(watch, "read_all", short)
    assert watch.main(["--events", "300", "--rate", "20000"]) == 1
    assert "read 10 of 300" in capsys.readouterr().out
