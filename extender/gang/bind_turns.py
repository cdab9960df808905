"""Turns for gangs' batches of bindings: a batch starts whole, first come first served, while at
most ``gang.bindingsAtOnce`` bindings are in flight (a batch larger than that goes alone).

Sent while other gangs' bindings were on their way to a busy apiserver, a gang's members were
bound over hundreds of milliseconds (docs/benchmarks.md, "The bind skew"); a few gangs at a time,
each gang's land together. Counting bindings, not gangs, leaves many small gangs as much room as a
few large ones, and lets the binder give room back binding by binding (``give_back(1)``), so the
next gang starts beside the tail of the one before.
"""

from __future__ import annotations

import asyncio
from collections import deque


class BindTurns:
    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: no limit
        self.in_flight = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.limit <= 0 or self.in_flight == 0 or self.in_flight + size <= self.limit

    async def take(self, size: int) -> None:
        """Wait for the turn of a batch of ``size`` bindings; ``give_back(size)`` once it is done."""
        if not self._waiting and self._fits(size):
            self.in_flight += size
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # given its turn just as it was cancelled
                self.give_back(size)
            else:
                self._waiting.remove((size, turn))
                self._wake()
            raise

    def give_back(self, size: int) -> None:
        self.in_flight -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            size, turn = self._waiting.popleft()
            self.in_flight += size
            turn.set_result(None)
