"""Noticing a watch whose connection died without a word.

A watch can go quiet for minutes and still be up; one whose peer vanished (a node rebooted, a
connection dropped by a middlebox) stays quiet for ever. aiohttp's ``sock_read`` timeout notices it,
but re-arms a timer on every chunk the socket delivers: a timer cancelled and scheduled again per
watch event, 5% of Quorum's CPU while it follows a busy cluster. This watchdog wakes up once per
``limit`` at most and compares the time of the last line read with it: the reader pays a float
store per line.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Closable(Protocol):
    def close(self) -> None: ...


class StallWatch:
    """Closes ``response`` once nothing was read from it for ``limit`` seconds (``stalled`` then
    says why the read ended). The reader stamps ``last_read`` with ``loop.time()`` per line."""

    def __init__(self, response: Closable, limit: float, loop: asyncio.AbstractEventLoop) -> None:
        self.response, self.limit, self.loop = response, limit, loop
        self.last_read = loop.time()
        self.stalled = False
        self._timer = loop.call_later(limit, self._check)

    def _check(self) -> None:
        quiet = self.loop.time() - self.last_read
        if quiet < self.limit:
            self._timer = self.loop.call_later(self.limit - quiet, self._check)
            return
        self.stalled = True
        self.response.close()

    def stop(self) -> None:
        self._timer.cancel()
