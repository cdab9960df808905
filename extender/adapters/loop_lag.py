"""How late the event loop runs: everything Quorum does shares one loop, so a callback that holds
it delays every answer to kube-scheduler and every binding. A timer that fires late says so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

SAMPLE_SECONDS = 0.25


async def sample_loop_lag(observe: Callable[[float], None], interval: float = SAMPLE_SECONDS,
                          clock: Callable[[], float] = time.monotonic) -> None:
    """Observe, every ``interval``, how long after its due time a sleeping task woke up."""
    while True:
        due = clock() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, clock() - due))
