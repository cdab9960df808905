"""Freed heap goes back to the system: the resident size after a burst does not stay at its peak."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from extender.adapters import heap_trim
from extender.adapters.heap_trim import heap_trimmer, trim_heap_periodically


def resident_anon_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_freed_memory_that_the_allocator_kept_is_returned() -> None:
    trim = heap_trimmer()
    assert trim is not None, "this platform's C library has no malloc_trim (the suite runs on glibc)"
    # Objects over 512 bytes come from malloc, not from Python's own arenas: a burst of them, one
    # in 64 kept alive, leaves the heap's pages mostly free but still resident.
    burst = [bytes(1000) + i.to_bytes(4, "little") for i in range(100_000)]
    kept = burst[::64]
    del burst
    before = resident_anon_mib()
    trim()
    after = resident_anon_mib()
    assert len(kept) == 1563
    assert before - after > 40, f"resident {before:.0f} MiB before the trim, {after:.0f} MiB after"


async def test_the_heap_is_trimmed_at_every_interval() -> None:
    calls: list[int] = []
    task = asyncio.create_task(trim_heap_periodically(lambda: calls.append(1), interval=0.02, check=0.01,
                                                      cpu=lambda: 0.0))
    await asyncio.sleep(0.11)
    task.cancel()
    assert 3 <= len(calls) <= 6


class FakeCpu:
    """The process's CPU seconds, moved by the test: each check reads the next value."""

    def __init__(self, readings: list[float]) -> None:
        self.readings = readings
        self.read = 0
        self.until = len(readings)
        self.done = asyncio.Event()  # set once ``until`` values were read

    def __call__(self) -> float:
        value = self.readings[min(self.read, len(self.readings) - 1)]
        self.read += 1
        if self.read >= self.until:
            self.done.set()
        return value


async def run_checks(cpu: FakeCpu, checks: int, blocks: list[int] | None = None) -> list[int]:
    """Run the trimmer with a one-hour interval for ``checks`` checks; the reads where it trimmed.
    ``blocks``: Python's allocated blocks at each read (the same throughout when not given)."""
    trims: list[int] = []
    counts = blocks or [1000]

    def allocated() -> int:
        return counts[min(max(cpu.read - 1, 0), len(counts) - 1)]

    task = asyncio.create_task(trim_heap_periodically(lambda: trims.append(cpu.read), interval=3600.0,
                                                      check=0.01, cpu=cpu, blocks=allocated))
    cpu.until = checks + 1
    await asyncio.wait_for(cpu.done.wait(), timeout=10)
    task.cancel()
    return trims


async def test_the_heap_is_trimmed_as_soon_as_a_burst_of_work_ends() -> None:
    # Start, then 6 s of CPU over two checks (busy: no trim), then a check with little: trimmed there.
    cpu = FakeCpu([0.0, 3.0, 6.0, 6.002, 6.004, 6.006, 6.008])
    assert await run_checks(cpu, 5) == [4]


async def test_steady_work_and_idleness_wait_for_the_interval() -> None:
    busy = FakeCpu([i * 0.5 for i in range(20)])  # half a core at every check: never quiet
    assert await run_checks(busy, 10) == []
    idle = FakeCpu([i * 0.002 for i in range(20)])  # quiet, but nothing was done to give back
    assert await run_checks(idle, 10) == []


async def test_the_heap_is_trimmed_once_many_objects_were_freed(monkeypatch: Any) -> None:
    monkeypatch.setattr(heap_trim, "FREED_SPACING_SECONDS", 0.0)
    # Little CPU throughout; 30,000 blocks go at the fourth read: trimmed at that check.
    cpu = FakeCpu([i * 0.002 for i in range(20)])
    many = [200_000, 200_000, 200_000, 170_000]
    assert await run_checks(cpu, 6, blocks=many) == [4]
    few = FakeCpu([i * 0.002 for i in range(20)])  # 5,000 freed: not worth a trim
    assert await run_checks(few, 6, blocks=[200_000, 200_000, 200_000, 195_000]) == []


async def test_trims_for_freed_blocks_are_spaced() -> None:
    # The same drop, but the last trim (the start) was under FREED_SPACING_SECONDS ago: no trim yet.
    cpu = FakeCpu([i * 0.002 for i in range(20)])
    assert await run_checks(cpu, 6, blocks=[200_000, 200_000, 200_000, 170_000]) == []
