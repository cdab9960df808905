"""The background tasks the core's side effects run as.

A decision never awaits the apiserver: it spawns the write and carries on. The runner keeps a
reference to each task until it ends, since the event loop itself keeps only weak ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class TaskRunner:
    """Side effects in flight."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
