"""Writes of one key made one at a time, in the order they were asked for.

Some writes to the apiserver carry a whole state rather than a change (all of a gang's PodGroup
conditions by server-side apply; a scale-up request deleted and made again under the same name).
Sent as independent tasks, an older one answered after a newer one undoes it. Runs of one key wait
for each other here (an ``asyncio.Lock`` wakes its waiters first come, first served); keys that no
run holds or awaits are forgotten.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class InOrder:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # key -> its lock, runs holding or awaiting it

    async def run(self, key: str, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` once every earlier run of ``key`` has finished."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                return await make()
        finally:
            lock, users = self._locks[key]
            if users > 1:
                self._locks[key] = (lock, users - 1)
            else:
                del self._locks[key]
