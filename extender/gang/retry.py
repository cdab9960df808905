"""Timers, backoff and nudges: everything that makes a gang try again.

kube-scheduler retries a rejected pod only on a cluster event. Quorum's own state changes (a
reservation made, a backoff over, a PodGroup appearing for pods already rejected, a restart) are
not cluster events, so the affected members are nudged: an annotation patch the scheduler sees
as a pod update. Nudges are sent on those transitions only, never in a loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..cluster.records import PodRecord
from .core import Core
from .registry import GangRegistry
from .state import GangState, count_failure, end_backoff, start_backoff
from .timers import Deadline, doubling

log = logging.getLogger(__name__)

# kube-scheduler retries a rejected pod on the cluster event that could help it (a pod deleted, a
# node added), but it may see that event before Quorum's own watch does, and then gets an answer
# from the old state. Gangs rejected this recently before such a change are asked to try again.
STALE_ANSWER_WINDOW_SECONDS = 10.0
# Changes arrive in bursts (a Job's pods deleted together); one re-check per burst is enough.
RECHECK_DELAY_SECONDS = 0.2


class NoFitMemory(Protocol):
    """Whether a gang's remembered no-fit still holds (``planning.Planner``)."""

    def nofit_unchanged(self, state: GangState) -> bool: ...


@dataclass(slots=True)
class Rejected:
    """When a member of the gang was last told "not enough members" or "does not fit" (0: not
    since): if the cache changes in a way that could alter that answer soon after, the answer may
    have come from a lagging watch."""

    at: float = 0.0
    # The rejection was a refused ``/preempt``: its members failed kube-scheduler's own filters on
    # every node, and such a pod is not retried on a pod update (the nudge), only on what frees
    # room. So the re-check starts Quorum's own preemption, whose evictions wake the members.
    displace: bool = False


class Retry:
    def __init__(self, core: Core, registry: GangRegistry, fits: NoFitMemory) -> None:
        self.core = core
        self.registry = registry
        self._fits = fits
        self._recheck: asyncio.TimerHandle | None = None
        self._rejected = registry.table(Rejected)
        self._last_rejection = 0.0  # latest rejection over all gangs
        # Gang members kube-scheduler may hold as unschedulable because of Quorum: answered with
        # no node since their last attempt, or pending when Quorum (re)started. Only these need a
        # nudge when their gang's placement is reserved; the others reach filter on their own.
        self._parked: set[str] = set()

    # ----------------------------------------------------------------- parked members
    def park(self, uid: str) -> None:
        self._parked.add(uid)

    def unpark(self, uid: str) -> None:
        self._parked.discard(uid)

    def is_parked(self, uid: str) -> bool:
        return uid in self._parked

    def parked(self) -> frozenset[str]:
        """Every member marked parked (for the invariants)."""
        return frozenset(self._parked)

    # ----------------------------------------------------------------- bind deadline
    def arm_deadline(self, state: GangState, on_expiry: Callable[[str], None]) -> None:
        self.registry.timers.arm(state.key, Deadline.BIND, self.core.bind_timeout(state.key), on_expiry)

    # ----------------------------------------------------------------- backoff
    def back_off(self, state: GangState, reason: str) -> None:
        """Quorum was not reached at bind in time (or re-planning failed): wait, doubling each time."""
        failures = count_failure(state)
        timings = self.core.config.gang
        delay = doubling(timings.backoff_base_seconds, failures - 1, timings.backoff_max_seconds)
        self.hold(state, delay, f"{reason}; backing off {delay:g}s")

    def hold(self, state: GangState, delay: float, reason: str) -> None:
        """Keep the gang in Backoff for ``delay`` seconds, then wake its pending members."""
        start_backoff(state, self.core.clock() + delay, reason)
        self.core.metrics.backoffs.inc()
        self.registry.timers.arm(state.key, Deadline.BACKOFF, delay, self._backoff_over)
        log.info("gang backoff", extra={"gang": state.key, "seconds": delay, "reason": reason})
        self.registry.sync(state, state.reason)

    def _backoff_over(self, key: str) -> None:
        state = self.registry.gangs.get(key)
        if state is None:
            return
        end_backoff(state)
        self.registry.sync(state, f"gang {key}: backoff over")
        self.core.requeue(key, self.core.pending_members(key), "backoff over")
        self.registry.forget_if_idle(key)

    # ----------------------------------------------------------------- nudges
    def nudge_gang(self, key: str, reason: str) -> None:
        """Wake a gang whose members were rejected for a reason that just went away: those Quorum
        turned away (the others were never parked because of Quorum, and come on their own)."""
        parked = self._parked
        self.core.requeue(key, [m for m in self.core.pending_members(key) if m.uid in parked], reason)

    def nudge_waiting_after_sync(self) -> None:
        """After a (re)start, gangs the previous instance rejected wait for no cluster event: give
        one member of each waiting gang a nudge, once the caches hold the whole cluster."""
        core = self.core
        for key in list(core.cache.gang_members):
            # The previous instance may have turned any of them away.
            self._parked.update(m.uid for m in core.pending_members(key))
            spec = core.cache.gang_spec(key)
            if spec is not None and spec.is_gang and core.ledger.reserved_count(key):
                continue
            pending = sorted(core.pending_members(key), key=lambda m: m.name)
            if pending:
                core.requeue(key, pending[:1], "Quorum (re)started")

    def note_rejection(self, state: GangState) -> None:
        self._rejected.of(state).at = self._last_rejection = self.core.clock()

    def note_preemption_refused(self, gang: str) -> None:
        """A ``/preempt`` refused for a reason only Quorum's watch can lift (the gang not known or
        not complete yet, its members not all delivered): the next change re-plans it."""
        state = self.registry.state(gang)
        self.note_rejection(state)
        self._rejected.of(state).displace = True

    def schedule_recheck(self) -> None:
        if self._recheck is not None:
            return
        horizon = self.core.clock() - STALE_ANSWER_WINDOW_SECONDS
        if self._last_rejection <= horizon:  # O(1): called for every pod and node change
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a cache filled before serving): nothing has been answered yet
        self._recheck = loop.call_later(RECHECK_DELAY_SECONDS, self._recheck_recent_rejections)

    def _recheck_recent_rejections(self) -> None:
        """Ask one member of each recently rejected gang to try again if its answer would change.

        One member is enough: if the gang fits now, its placement wakes the others.
        """
        self._recheck = None
        core = self.core
        now = core.clock()
        for key, state in list(self.registry.gangs.items()):
            rejected = self._rejected.of(state)
            if (rejected.at <= now - STALE_ANSWER_WINDOW_SECONDS or core.ledger.reserved_count(key)
                    or state.backoff_until > now):
                continue
            pending = self._worth_rechecking(state)
            if pending:
                rejected.at = 0.0
                core.metrics.rechecks.inc()
                if rejected.displace and core.earmarks is not None:
                    rejected.displace = False
                    self.registry.sync(state, f"gang {key}: cluster changed since preemption was refused")
                    core.earmarks.displace(key, fresh=True)
                core.requeue(key, pending[:1], "cluster changed since its last rejection")

    def _worth_rechecking(self, state: GangState) -> list[PodRecord]:
        core = self.core
        spec = core.cache.gang_spec(state.key)
        if spec is None or not spec.is_gang:
            return []
        if core.cache.membership.alive_count(state.key) < spec.min_count:
            return []  # still short of members: the same answer again
        if self._fits.nofit_unchanged(state):
            return []  # nothing the placement depends on has moved
        return sorted((m for m in core.cache.members(state.key) if m.pending), key=lambda m: m.name)
