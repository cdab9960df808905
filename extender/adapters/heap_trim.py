"""Giving freed heap back to the system.

Decoding a relist or a burst of watch events allocates many short-lived objects. CPython frees
them, but glibc's allocator keeps the pages, so Quorum's resident size after a burst stays near its
peak (130 MiB after the cluster benchmark's runs, 97 MiB once trimmed). ``malloc_trim`` hands whole
free pages back; called once a minute it costs the loop a few milliseconds. It is also called as
soon as a burst ends (the process used 5 s of CPU or more since the last trim, and under a quarter
of a core over the last two seconds), so the resident size drops when the work does, not up to a
minute later. Watching a busy 1,000-node cluster alone takes Quorum 5-15% of a core, so "quiet"
cannot mean idle. And when many objects were freed at once (20,000 of Python's allocated blocks gone
since their peak: a finished job's pods deleted, a burst's idle connections to the apiserver closed),
without much CPU spent, a quiet check trims too, at most every 10 s. After a cluster benchmark run
the largest such release was the binding connections closing (about 116 TLS connections, each with
asyncio's 256 KiB read buffer then, 64 KiB since): 31 MiB trimmed within 2 s of their close.
Only where the C library has it (glibc); elsewhere nothing is done.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
import time
from collections.abc import Callable

TRIM_SECONDS = 60.0
QUIET_CHECK_SECONDS = 2.0
QUIET_SHARE = 0.25  # under a quarter of a core over the last check: the burst is over
BURST_CPU_SECONDS = 5.0  # CPU spent since the last trim that makes a trim worth it once quiet
FREED_BLOCKS = 20_000  # ... or this many of Python's allocated blocks freed since their peak
FREED_SPACING_SECONDS = 10.0  # trims for freed blocks at most this often (each walks the heap)


def heap_trimmer() -> Callable[[], None] | None:
    """A function that returns the heap's free pages to the system, or None without glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def trim_all() -> None:
        trim(0)
    return trim_all


async def trim_heap_periodically(trim: Callable[[], None], interval: float = TRIM_SECONDS,
                                 check: float = QUIET_CHECK_SECONDS,
                                 cpu: Callable[[], float] = time.process_time,
                                 blocks: Callable[[], int] = sys.getallocatedblocks) -> None:
    """Trim every ``interval`` seconds, and at the first quiet ``check`` after a burst of work or
    after many objects were freed."""
    clock = asyncio.get_running_loop().time
    trimmed_at, cpu_at_trim, peak = clock(), cpu(), blocks()
    cpu_before = cpu_at_trim
    while True:
        await asyncio.sleep(check)
        cpu_now, blocks_now = cpu(), blocks()
        peak = max(peak, blocks_now)
        quiet = cpu_now - cpu_before < check * QUIET_SHARE
        since = clock() - trimmed_at
        freed = blocks_now <= peak - FREED_BLOCKS and since >= FREED_SPACING_SECONDS
        if (quiet and (freed or cpu_now - cpu_at_trim >= BURST_CPU_SECONDS)) or since >= interval:
            trim()
            trimmed_at, cpu_now, peak = clock(), cpu(), blocks()
            cpu_at_trim = cpu_now
        cpu_before = cpu_now
