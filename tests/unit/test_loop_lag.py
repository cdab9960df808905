"""The event-loop lag sampler: a callback that holds the loop shows up as a late timer."""

from __future__ import annotations

import asyncio
import time

from extender.adapters.loop_lag import sample_loop_lag


async def test_a_blocked_loop_is_observed_as_lag_and_an_idle_one_is_not() -> None:
    seen: list[float] = []
    sampler = asyncio.create_task(sample_loop_lag(seen.append, interval=0.05))
    await asyncio.sleep(0.12)  # idle: two or so samples, each on time
    idle = list(seen)
    time.sleep(0.5)  # noqa: ASYNC251 - on purpose: a callback holding the loop past the due time
    await asyncio.sleep(0.06)
    sampler.cancel()
    assert idle and max(idle) < 0.2  # generous: the machine may be busy
    assert max(seen) >= 0.4
