"""State shared by the parts of the gang core, and the one path that changes a gang's phase.

The parts (gates, planning, binding, retry) each own one concern and reach the shared state
through a ``Core``: the cache (read-only), the capacity ledger, the gang registry, side effects
and the clock. Everything runs on the event loop; nothing that changes state awaits in between,
so there are no locks and no torn updates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cluster.cache import ClusterCache
from ..cluster.records import GangSpec, PodRecord
from ..config import Config
from ..metrics import Metrics
from .ledger import CapacityLedger
from .state import Facts, GangState, Phase, derive_phase, transition


class BindFailed(Exception):
    """The apiserver refused a binding."""


class ClusterActions(Protocol):
    """Side effects the core needs; implemented by ``adapters.kube.KubeClient``."""

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def requeue_pods(self, pods: list[PodRecord], reason: str) -> None: ...


def alive_count(members: Iterable[PodRecord]) -> int:
    """Members that count towards the quorum gate: bound, or pending and schedulable now."""
    return sum(1 for m in members if m.counts_for_quorum)


@dataclass
class Core:
    config: Config
    cache: ClusterCache
    ledger: CapacityLedger
    actions: ClusterActions
    metrics: Metrics
    clock: Callable[[], float]
    strict: bool = False  # illegal transitions raise (tests) instead of being logged
    gangs: dict[str, GangState] = field(default_factory=dict)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def state(self, key: str) -> GangState:
        state = self.gangs.get(key)
        if state is None:
            state = self.gangs[key] = GangState(key, first_seen=self.clock())
        return state

    def requeue(self, key: str, pods: list[PodRecord], reason: str) -> None:
        """Nudge kube-scheduler to retry members now: our state changed without a cluster event."""
        if pods:
            self.spawn(self.actions.requeue_pods(pods, f"gang {key}: {reason}"))

    def pending_members(self, key: str) -> list[PodRecord]:
        return [p for p in self.cache.members(key) if p.pending]

    def running_count(self, key: str) -> int:
        """Members bound, as the cache sees it plus binds that succeeded but are not seen yet."""
        members = self.cache.members(key)
        bound = sum(1 for m in members if m.holds_capacity)
        return bound + self.ledger.inflight_of(key, (m.uid for m in members if not m.node_name))

    def min_count(self, state: GangState, spec: GangSpec | None) -> int:
        return spec.min_count if spec is not None else state.min_count_reserved

    def facts(self, state: GangState) -> Facts:
        spec = self.cache.gang_spec(state.key)
        members = self.cache.members(state.key)
        valid = spec is not None and not spec.problem and spec.min_count >= 1
        min_count = spec.min_count if spec is not None and valid else max(state.min_count_reserved, 1)
        return Facts(
            spec_valid=valid or spec is None,
            declared=spec is not None,
            alive=alive_count(members),
            running=self.running_count(state.key),
            min_count=min_count,
            reserved=self.ledger.reserved_count(state.key),
            held=len(state.held),
            binding=state.binds_in_flight > 0,
            backing_off=state.backoff_until > self.clock(),
        )

    def sync(self, state: GangState, reason: str = "") -> Phase:
        """Move the gang to the phase its facts imply (through the checked transition)."""
        target = derive_phase(self.facts(state))
        if target == Phase.BOUND and state.backoff_until:
            # Bound (members bound elsewhere, or minCount lowered): an earlier backoff is moot.
            state.backoff_until = 0.0
            if state.backoff_timer is not None:
                state.backoff_timer.cancel()
                state.backoff_timer = None
        transition(state, target, reason, strict=self.strict, count=self._count)
        return target

    def release(self, state: GangState, reason: str, metric_reason: str) -> None:
        """Drop the whole reservation and answer every held bind with an error.

        kube-scheduler forgets the assumed pods on that error and requeues them; nothing of the
        gang keeps capacity it may never use.
        """
        freed = self.ledger.release_gang(state.key)
        if freed or state.held:
            self.metrics.reservation_releases.labels(metric_reason).inc()
        for held in state.held.values():
            if not held.answer.done():
                held.answer.set_result(reason)
        state.held.clear()
        if state.deadline is not None:
            state.deadline.cancel()
            state.deadline = None
        state.domain = ()
        state.min_count_reserved = 0
        state.reason = reason
        if freed:
            self.wake_gangs_that_did_not_fit(exclude=state.key)

    def wake_gangs_that_did_not_fit(self, exclude: str) -> None:
        """Capacity came back without a cluster event: nudge gangs that did not fit."""
        for key, other in self.gangs.items():
            if key != exclude and other.nofit is not None and not self.ledger.reserved_count(key):
                self.requeue(key, self.pending_members(key), "capacity released")

    def forget_if_idle(self, key: str) -> None:
        """Drop a gang's state once nothing refers to it (no members, no PodGroup, nothing held).

        Filter calls may name gangs that do not exist; they must not leave phantom gangs behind.
        """
        state = self.gangs.get(key)
        if state is None or self.cache.gang_members.get(key) or key in self.cache.podgroup_specs:
            return
        if self.ledger.reserved_count(key) or state.held or state.binds_in_flight:
            return
        state.cancel_timers()
        del self.gangs[key]

    def _count(self, source: Phase, target: Phase) -> None:
        self.metrics.transitions.labels(str(source), str(target)).inc()
