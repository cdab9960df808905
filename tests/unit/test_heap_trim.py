"""Freed heap goes back to the system: the resident size after a burst does not stay at its peak."""

from __future__ import annotations

import asyncio
from pathlib import Path

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
    task = asyncio.create_task(trim_heap_periodically(lambda: calls.append(1), interval=0.02))
    await asyncio.sleep(0.11)
    task.cancel()
    assert 3 <= len(calls) <= 6
