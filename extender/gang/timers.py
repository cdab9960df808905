"""A gang's deadlines, armed and cancelled in one place.

A gang has at most one timer of each kind: the bind deadline (quorum must be reached at bind in
time), the end of a backoff, the readiness deadline, the recovery deadline, the deferred write
of a waiting gang's shortfall and the deferred Event of a passing phase. Arming a kind
replaces the one armed before; a timer that fires is forgotten before its callback runs, so the
callback may arm the same kind again. Parts ask whether a kind is armed instead of keeping handles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum


class Deadline(StrEnum):
    BIND = "bind"  # quorum at bind within the bind timeout (``retry.py``)
    BACKOFF = "backoff"  # the end of a backoff (``retry.py``)
    READY = "ready"  # minCount members Ready after the quorum bind (``lifecycle.py``)
    RECOVERY = "recovery"  # a recovering gang whole again (``lifecycle.py``)
    SHORTFALL = "shortfall"  # a waiting gang's newest shortfall to its conditions (``reporting.py``)
    PASSING = "passing"  # the Event of a passing phase, if the gang is still in it (``reporting.py``)
    REASSERT = "reassert"  # conditions another writer replaced, put back (``reporting.py``)


class GangTimers:
    """Every gang's armed deadlines, by gang key and kind."""

    def __init__(self) -> None:
        self._armed: dict[tuple[str, Deadline], asyncio.TimerHandle] = {}

    def arm(self, key: str, kind: Deadline, delay: float, on_expiry: Callable[[str], None]) -> None:
        """Call ``on_expiry(key)`` in ``delay`` seconds, replacing the gang's timer of that kind."""
        self.cancel(key, kind)
        self._armed[(key, kind)] = asyncio.get_running_loop().call_later(
            delay, self._fire, key, kind, on_expiry)

    def _fire(self, key: str, kind: Deadline, on_expiry: Callable[[str], None]) -> None:
        self._armed.pop((key, kind), None)
        on_expiry(key)

    def armed(self, key: str, kind: Deadline) -> bool:
        return (key, kind) in self._armed

    def cancel(self, key: str, *kinds: Deadline) -> None:
        """Cancel the gang's timers of these kinds (those not armed are ignored)."""
        for kind in kinds:
            handle = self._armed.pop((key, kind), None)
            if handle is not None:
                handle.cancel()

    def cancel_all(self, key: str) -> None:
        self.cancel(key, *Deadline)

    def count(self) -> int:
        """Timers armed over all gangs (for checks: a forgotten gang leaves none behind)."""
        return len(self._armed)


def doubling(base: float, doublings: int, cap: float) -> float:
    """``base * 2^doublings``, capped. A count that grew without bound (a gang missing its quorum
    thousands of times) gives the cap, never an OverflowError inside a timer callback."""
    return cap if doublings >= 64 else min(base * 2.0 ** max(doublings, 0), cap)
