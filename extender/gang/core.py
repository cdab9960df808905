"""State shared by the parts of the gang core, and the one path that changes a gang's phase.

The parts (gates, planning, binding, retry) each own one concern and reach the shared state
through a ``Core``: the cache (read-only), the capacity ledger, the gang registry, side effects
and the clock. Everything runs on the event loop; nothing that changes state awaits in between,
so there are no locks and no torn updates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cluster.cache import ClusterCache
from ..cluster.records import GangHome, GangSpec, PodRecord
from ..config import Config
from .effects import NORMAL, GangCondition, ObjectRef
from .ledger import CapacityLedger
from .state import (
    Claim,
    Facts,
    GangState,
    Phase,
    clear_reserved,
    derive_phase,
    end_backoff,
    mark_started,
    take_held,
    transition,
)
from .telemetry import GangMetrics
from .timers import Deadline, GangTimers


class BindFailed(Exception):
    """The apiserver refused a binding."""


class EvictionFailed(Exception):
    """The apiserver refused an eviction (for example a PodDisruptionBudget does not allow it)."""


class ClusterActions(Protocol):
    """Side effects the core needs; implemented by ``adapters.kube.KubeClient``."""

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def requeue_pods(self, pods: list[PodRecord], reason: str) -> None: ...

    async def evict_pod(self, namespace: str, name: str, uid: str, reason: str,
                        grace_seconds: int | None = None, dry_run: bool = False) -> None:
        """Evict through the Eviction API (PodDisruptionBudgets apply); a pod already gone is
        success. Raises ``EvictionFailed`` otherwise (a budget refused it: tried again later).
        ``grace_seconds=0`` removes a pod whose node is gone at once, as pod GC would. With
        ``dry_run`` nothing is evicted: it only asks whether the eviction would be allowed (the
        same ``EvictionFailed`` when not), so a gang is evicted all or none."""
        ...

    def record_event(self, regarding: ObjectRef, type_: str, reason: str, action: str,
                     note: str) -> None:
        """Queue an events.k8s.io/v1 Event; repeats are aggregated, never sent one by one."""
        ...

    async def set_gang_conditions(self, home: GangHome, conditions: list[GangCondition]) -> None:
        """Apply Quorum's conditions to a PodGroup's status (others' conditions are kept)."""
        ...

    async def annotate_gang(self, home: GangHome, annotations: dict[str, str | None]) -> bool:
        """Set (None: remove) bookkeeping annotations on a gang's object; whether it was written."""
        ...

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Set (None: remove) bookkeeping annotations on a pod; whether it was written."""
        ...

    async def write_started_configmap(self, namespace: str, name: str, owner: GangHome | None,
                                      data: dict[str, str]) -> bool:
        """Create or update the gang-started ConfigMap (owned by the gang's object when it has one)."""
        ...

    async def delete_started_configmap(self, namespace: str, name: str) -> bool:
        """Delete it (a gang that starts over); a ConfigMap already gone is success."""
        ...

    async def create_scale_up(self, namespace: str, name: str, gang: str, node_selector: dict[str, str],
                              requests: dict[str, int], count: int, class_name: str,
                              together: str = "") -> bool:
        """An atomic ProvisioningRequest (and its PodTemplate) for ``count`` pods of ``requests``
        on nodes with ``node_selector`` (all on one value of the ``together`` label, if given);
        True when made (or already there)."""
        ...

    async def delete_scale_up(self, namespace: str, name: str) -> bool:
        """Delete the request and its PodTemplate; gone already is success."""
        ...


class Reporter(Protocol):
    """Where the core's Events go (``reporting.Reporter``): about a gang, or about one pod."""

    def gang(self, state: GangState, reason: str, note: str, type_: str) -> None: ...

    def pod(self, pod: PodRecord, reason: str, note: str, type_: str) -> None: ...


def alive_count(members: Iterable[PodRecord]) -> int:
    """Members that count towards the quorum gate: bound, or pending and schedulable now."""
    return sum(1 for m in members if m.counts_for_quorum and not m.deleting)


def runs(member: PodRecord) -> bool:
    """A member that counts as running: bound, not finished and not on its way out.

    A member being deleted or evicted still holds its capacity until it stops, but it is no
    longer part of the gang: the gang's replacement must not wait for it, nor count on it.
    """
    return member.holds_capacity and not member.deleting


def gang_priority(cache: ClusterCache, key: str) -> int:
    """A gang's place in line: its PodGroup's priority when set, else its pods' highest."""
    spec = cache.gang_spec(key)
    if spec is not None and spec.priority:
        return spec.priority
    return max((m.priority for m in cache.members(key)), default=0)


class Earmarks(Protocol):
    """The head-of-line claim (``queue.GangQueue``), as the filter paths ask about it."""

    def blocking(self, gang: str | None, priority: int) -> Claim | None:
        """The claim a pod of ``gang`` (None: no gang) at ``priority`` must keep off, if any."""
        ...

    def check(self) -> list[str]:
        """Violations of the claim's invariants."""
        ...

    def view(self, key: str) -> dict[str, object]:
        """A gang's place in the queue, for /debug/gangs."""
        ...

    def document(self) -> dict[str, object] | None:
        """The claim, for /debug/gangs."""
        ...


# Told of every phase change: (gang, from, to, reason). Events and PodGroup status hang off it.
PhaseObserver = Callable[[GangState, Phase, Phase, str], None]


@dataclass
class Core:
    config: Config
    cache: ClusterCache
    ledger: CapacityLedger
    actions: ClusterActions
    metrics: GangMetrics
    clock: Callable[[], float]
    strict: bool = False  # illegal transitions raise (tests) instead of being logged
    wall: Callable[[], float] = time.time  # for what outlives the process (PodGroup annotations)
    gangs: dict[str, GangState] = field(default_factory=dict)
    timers: GangTimers = field(default_factory=GangTimers)
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    observers: list[PhaseObserver] = field(default_factory=list)
    reporter: Reporter | None = None
    earmarks: Earmarks | None = None

    def note(self, state: GangState, reason: str, note: str, type_: str = NORMAL) -> None:
        """An Event about the gang (beyond its phase changes, which observers report)."""
        if self.reporter is not None:
            self.reporter.gang(state, reason, note, type_)

    def note_pod(self, pod: PodRecord, reason: str, note: str, type_: str = NORMAL) -> None:
        if self.reporter is not None:
            self.reporter.pod(pod, reason, note, type_)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def state(self, key: str) -> GangState:
        state = self.gangs.get(key)
        if state is None:
            state = self.gangs[key] = GangState(key, first_seen=self.clock())
        return state

    def schedules(self, pod: PodRecord) -> bool:
        """Whether the pod belongs to a kube-scheduler profile Quorum serves (any, unless
        ``schedulerNames`` is set). Quorum sees every gang, since capacity is shared, but binds
        and writes only the pods it schedules."""
        names = self.config.scheduler_names
        return not names or pod.scheduler_name in names

    def requeue(self, key: str, pods: list[PodRecord], reason: str) -> None:
        """Nudge kube-scheduler to retry members now: our state changed without a cluster event.
        Never a pod of another scheduler's profile."""
        pods = [p for p in pods if self.schedules(p)]
        if pods:
            self.spawn(self.actions.requeue_pods(pods, f"gang {key}: {reason}"))

    def pending_members(self, key: str) -> list[PodRecord]:
        return [p for p in self.cache.members(key) if p.pending]

    def running_count(self, key: str) -> int:
        """Members bound, as the cache sees it plus binds that succeeded but are not seen yet."""
        members = self.cache.members(key)
        state = self.gangs.get(key)
        evicting = state.evicting if state is not None else ()
        bound = sum(1 for m in members if runs(m) and m.uid not in evicting)
        return bound + self.ledger.inflight_of(key, (m.uid for m in members if not m.node_name), evicting)

    def running_nodes(self, key: str) -> list[str]:
        """Nodes of the members that run (or whose bind succeeded): they pin the gang's domain.

        A member on its way out (deleted, evicted, its node gone) pins nothing: replacements must
        join the survivors, not the node that failed.
        """
        inflight = self.ledger.inflight()
        evicting = self.gangs[key].evicting if key in self.gangs else set()
        out = []
        for m in self.cache.members(key):
            if runs(m) and m.uid not in evicting and m.node_name in self.cache.nodes:
                out.append(m.node_name)
            elif m.uid in inflight:
                out.append(inflight[m.uid])
        return out

    def ready_count(self, key: str) -> int:
        """Running members whose Ready condition is True (what the readiness timeout waits for).

        A member on a node that is not Ready does not count, whether or not the node lifecycle
        controller has marked the pod itself not Ready yet.
        """
        state = self.gangs.get(key)
        evicting = state.evicting if state is not None else ()
        nodes = self.cache.nodes
        return sum(1 for m in self.cache.members(key)
                   if runs(m) and m.ready and m.uid not in evicting
                   and (node := nodes.get(m.node_name)) is not None and node.ready)

    def min_count(self, state: GangState, spec: GangSpec | None) -> int:
        return spec.min_count if spec is not None else state.min_count_reserved

    def bind_timeout(self, key: str) -> float:
        """How long a reserved gang may take to reach quorum at bind. A gang may shorten it
        (coscheduling's ``scheduleTimeoutSeconds``) but never lengthen it: held bind calls must
        answer within kube-scheduler's extender ``httpTimeout``, which the configured value respects."""
        spec = self.cache.gang_spec(key)
        configured = self.config.gang.bind_timeout_seconds
        return min(spec.bind_timeout, configured) if spec is not None and spec.bind_timeout else configured

    def facts(self, state: GangState) -> Facts:
        spec = self.cache.gang_spec(state.key)
        members = self.cache.members(state.key)
        valid = spec is not None and not spec.problem and spec.min_count >= 1
        min_count = spec.min_count if spec is not None and valid else max(state.min_count_reserved, 1)
        running = self.running_count(state.key)
        backing_off = state.backoff_until > self.clock()
        return Facts(
            spec_valid=valid or spec is None,
            declared=spec is not None,
            alive=alive_count(members),
            running=running,
            min_count=min_count,
            reserved=self.ledger.reserved_count(state.key),
            held=len(state.held),
            binding=state.binds_in_flight > 0,
            backing_off=backing_off,
            recovering=self.recovering(state, running, min_count) and not backing_off,
            deactivated=bool(state.deactivated),
        )

    def recovering(self, state: GangState, running: int, min_count: int) -> bool:
        """A gang that ran at quorum and lost members, or (after being Ready) their readiness.

        A gang one of whose members succeeded is finishing: members leaving it are no failure.
        """
        if not state.started or state.completing:
            return False
        if running < min_count:
            return True
        return state.pods_ready and self.ready_count(state.key) < min_count

    def sync(self, state: GangState, reason: str = "") -> Phase:
        """Move the gang to the phase its facts imply (through the checked transition)."""
        target = derive_phase(self.facts(state))
        if target == Phase.BOUND:
            mark_started(state, True)
            if state.backoff_until:
                # Bound (members bound elsewhere, or minCount lowered): an earlier backoff is moot.
                end_backoff(state)
                self.timers.cancel(state.key, Deadline.BACKOFF)
        source = state.phase
        transition(state, target, reason, strict=self.strict, count=self._count)
        if target != source:
            for observer in self.observers:
                observer(state, source, target, state.reason)
        return target

    def release(self, state: GangState, reason: str, metric_reason: str) -> None:
        """Drop the whole reservation and answer every held bind with an error.

        kube-scheduler forgets the assumed pods on that error and requeues them; nothing of the
        gang keeps capacity it may never use.
        """
        freed = self.ledger.release_gang(state.key)
        if freed or state.held:
            self.metrics.reservation_releases.labels(metric_reason).inc()
        for held in take_held(state):
            if not held.answer.done():
                held.answer.set_result(reason)
        self.timers.cancel(state.key, Deadline.BIND)
        clear_reserved(state, reason)
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
        declared = self.cache.declarations.declared_by_object(key)
        if state is None or self.cache.gang_members.get(key) or declared:
            return
        if self.ledger.reserved_count(key) or state.held or state.binds_in_flight:
            return
        if state.backoff_until > self.clock() or state.deactivated:
            # A requeued gang between its evicted members and the owner's replacements: what it
            # must wait for, and its count, outlive the pods.
            return
        self.timers.cancel_all(key)
        del self.gangs[key]

    def _count(self, source: Phase, target: Phase) -> None:
        self.metrics.transitions.labels(str(source), str(target)).inc()
