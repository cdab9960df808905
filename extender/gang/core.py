"""The collaborators shared by the parts of the gang core, and the side effects they ask for.

The parts (gates, planning, binding, retry) each own one concern and reach what they share
through a ``Core``: the cache (read-only), the capacity ledger, side effects and the clock. The
gangs themselves live in the registry (``registry.py``), which alone changes them. Everything runs
on the event loop; nothing that changes state awaits in between, so there are no locks and no
torn updates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cluster.cache import ClusterCache
from ..cluster.records import GangHome, GangSpec, PodRecord
from ..config import Config
from .effects import NORMAL, GangCondition, ObjectRef
from .ledger import CapacityLedger
from .runner import TaskRunner
from .state import Claim, GangState
from .telemetry import GangMetrics


class BindFailed(Exception):
    """The apiserver refused a binding."""


class EvictionFailed(Exception):
    """The apiserver refused an eviction (for example a PodDisruptionBudget does not allow it)."""


class ClusterActions(Protocol):
    """Side effects the core needs; implemented by ``adapters.kube.KubeClient``."""

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def requeue_pods(self, pods: list[PodRecord], reason: str,
                           wanted: Callable[[PodRecord], bool]) -> None:
        """Nudge each pod for which ``wanted`` still holds when its write is about to be sent."""
        ...

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

    def displace(self, key: str, fresh: bool = False) -> frozenset[str]:
        """Let the gang preempt if it is first in the queue (as ``/preempt`` does); its victims.
        ``fresh``: the cache changed since its last search, so a search that found nothing a
        moment ago is no reason to skip this one."""
        ...


@dataclass
class Core:
    """The collaborators every part shares, none of them gang state: configuration, the cache
    (read-only), the capacity ledger, the cluster's side effects and the task runner that carries
    them out, metrics and clocks. What Quorum remembers about gangs lives in ``registry.py``."""

    config: Config
    cache: ClusterCache
    ledger: CapacityLedger
    actions: ClusterActions
    metrics: GangMetrics
    clock: Callable[[], float]
    strict: bool = False  # illegal transitions raise (tests) instead of being logged
    wall: Callable[[], float] = time.time  # for what outlives the process (PodGroup annotations)
    runner: TaskRunner = field(default_factory=TaskRunner)
    reporter: Reporter | None = None
    earmarks: Earmarks | None = None

    def note(self, state: GangState, reason: str, note: str, type_: str = NORMAL) -> None:
        """An Event about the gang (beyond its phase changes, which observers report)."""
        if self.reporter is not None:
            self.reporter.gang(state, reason, note, type_)

    def note_pod(self, pod: PodRecord, reason: str, note: str, type_: str = NORMAL) -> None:
        if self.reporter is not None:
            self.reporter.pod(pod, reason, note, type_)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a side effect in the background (the runner keeps it alive until it ends)."""
        self.runner.spawn(coro)

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
            self.spawn(self.actions.requeue_pods(pods, f"gang {key}: {reason}", self.still_waiting))

    def still_waiting(self, pod: PodRecord) -> bool:
        """Whether a nudge decided earlier is still of use when it is sent: the pod is pending and
        no bind of it is under way. Writes queue behind each other, and a nudge that lands after
        the binding is a pod update nobody needs (the node's kubelet has to look at it, too)."""
        current = self.cache.pods.get(pod.uid)
        return current is not None and current.pending and not self.ledger.is_inflight(pod.uid)

    def pending_members(self, key: str) -> list[PodRecord]:
        return [p for p in self.cache.members(key) if p.pending]

    def min_count(self, state: GangState, spec: GangSpec | None) -> int:
        return spec.min_count if spec is not None else state.min_count_reserved

    def bind_timeout(self, key: str) -> float:
        """How long a reserved gang may take to reach quorum at bind. A gang may shorten it
        (coscheduling's ``scheduleTimeoutSeconds``) but never lengthen it: held bind calls must
        answer within kube-scheduler's extender ``httpTimeout``, which the configured value respects."""
        spec = self.cache.gang_spec(key)
        configured = self.config.gang.bind_timeout_seconds
        return min(spec.bind_timeout, configured) if spec is not None and spec.bind_timeout else configured
