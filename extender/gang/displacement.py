"""Whole-gang preemption decided by Quorum: the head of the queue displaces lower-priority work.

kube-scheduler's own preemption works one pod at a time and knows nothing of gangs: it can evict
part of a running gang, or evict work for a gang that still cannot fit. So with
``preemption.enabled`` Quorum decides instead, for the gang first in the queue that does not fit:

- the victims are whole units of strictly lower priority, each a running gang (every member goes:
  a gang is never left partly running) or a plain pod, chosen by ``topology.victims`` to free a
  fitting placement in one domain with the fewest units, lowest priority first;
- the plan is reported (log, and a ``Preempting`` Event on the preemptor) before anything is
  evicted, then every victim is evicted through the Eviction API (PodDisruptionBudgets apply);
  a victim gang is requeued without a backoff and waits its turn like any other;
- a victim gang is evicted all or none: its members' evictions are asked first (a dry run), and
  when a budget refuses any, none is evicted, the gang says why (``EvictionRefused``), is spared
  for ``SPARED_SECONDS``, and the preemptor plans again with other victims;
- the preemptor claims the domain at once (``queue.py``), so nothing else takes what the victims
  free while they terminate;
- one displacement is under way at a time; the next is planned when its victims are gone (or
  after ``preemption.victimGraceSeconds``, when a budget keeps one from going).

A gang whose PodGroup, or any of whose pending members, says ``preemptionPolicy: Never`` displaces
nothing (it can still be displaced). A native PodGroup with ``disruptionMode: Single`` is no unit:
its running members are victims one by one, like plain pods, and the gang may be left below its
quorum, as its owner chose.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ..cluster.records import DisruptionMode, GangSpec, PodRecord, PreemptionPolicy
from ..topology.apart import resolve_apart
from ..topology.placement import Member
from ..topology.victims import Displacement, Unit, choose_victims
from .core import Core, gang_priority, runs
from .effects import WARNING
from .lifecycle import Lifecycle
from .registry import GangRegistry
from .state import GangState

log = logging.getLogger(__name__)


def pod_by_pod(core: Core, spec: GangSpec) -> bool:
    """Whether the gang's members may be preempted one by one: its PodGroup says
    ``disruptionMode: single`` and the configuration honours it (off by default: gangs go whole)."""
    return core.config.preemption.honor_disruption_mode and spec.disruption is DisruptionMode.SINGLE

PLAN_INTERVAL_SECONDS = 5.0  # a gang whose displacement found nothing is not searched again sooner
SPARED_SECONDS = 30.0  # a victim gang whose eviction a budget refused is not chosen again sooner


@dataclass(slots=True)
class UnderWay:
    gang: str
    started: float
    victims: frozenset[str]  # pod uids
    victim_gangs: frozenset[str]
    displacement: Displacement


class Displacer:
    def __init__(self, core: Core, registry: GangRegistry, lifecycle: Lifecycle) -> None:
        self.core = core
        self.registry = registry
        self.lifecycle = lifecycle
        self.under_way: UnderWay | None = None
        self._searched: dict[str, float] = {}  # gang -> when a search last found nothing
        self._spared: dict[str, float] = {}  # victim gang -> until when it is not chosen

    @property
    def enabled(self) -> bool:
        return self.core.config.preemption.enabled

    def busy(self) -> bool:
        """A displacement whose victims still hold capacity (and are within their grace)."""
        work = self.under_way
        if work is None:
            return False
        pods = self.core.cache.pods
        waiting = any(uid in pods and pods[uid].holds_capacity for uid in work.victims)
        if waiting and self.core.clock() - work.started < self.core.config.preemption.victim_grace_seconds:
            return True
        self.under_way = None
        return False

    def victims_for(self, gang: str) -> frozenset[str]:
        """The pods being displaced for ``gang`` (empty when none are): plain pods, and members of
        victim gangs whose evictions all passed their dry runs. kube-scheduler deletes the victims
        it proposes without asking their budgets, so a gang still being asked about (or spared)
        offers none."""
        work = self.under_way
        if work is None or work.gang != gang or not self.busy():
            return frozenset()
        return frozenset(uid for uid in work.victims if self._committed(uid, work.victim_gangs))

    def _committed(self, uid: str, victim_gangs: frozenset[str]) -> bool:
        record = self.core.cache.pods.get(uid)
        key = record.gang_key if record is not None else None
        if key is None or key not in victim_gangs:
            return True
        state = self.registry.gangs.get(key)
        return state is not None and uid in state.evicting

    def priority_of(self, key: str) -> int:
        return gang_priority(self.core.cache, key)

    def consider(self, state: GangState, fresh: bool = False) -> Displacement | None:
        """Plan and start a displacement for the gang; the plan when one was started. ``fresh``:
        search even when a search found nothing within ``PLAN_INTERVAL_SECONDS`` (the cache has
        changed since)."""
        core = self.core
        if not self.enabled or self.busy():
            return None
        now = core.clock()
        recent = now - self._searched.get(state.key, -PLAN_INTERVAL_SECONDS) < PLAN_INTERVAL_SECONDS
        if recent and not fresh:
            return None
        spec = core.cache.gang_spec(state.key)
        members = self._members_to_place(state.key, spec)
        if spec is None or members is None:
            return None
        priority = self.priority_of(state.key)
        required = core.config.level_index(spec.required_topology) if spec.required_topology else None
        units, unit_gangs = self._units(below=priority, exclude=state.key)
        plan = self._plan(state.key, units, members, required) if units else None  # nothing to evict
        if plan is None or not plan.units:
            self._searched[state.key] = now
            if len(self._searched) > 4096:
                self._searched.clear()
            return None
        self._execute(state, priority, plan, unit_gangs)
        return plan

    def _plan(self, key: str, units: list[Unit], members: list[Member], required: int | None
              ) -> Displacement | None:
        core = self.core
        cache = core.cache  # members that repel each other count one per node
        repel = resolve_apart((m for m in cache.members(key) if m.pending), cache.level_labels,
                              self.registry.running_nodes(key), cache.nodes)
        return choose_victims(core.ledger.claim_nodes(key), units, members, len(core.config.levels),
                              required, per_node=None if repel is None else 1)

    def _members_to_place(self, key: str, spec: GangSpec | None) -> list[Member] | None:
        """The pending members a displacement must make room for (enough for quorum), or None when
        the gang cannot displace: not declared, nothing pending, too few, or its PodGroup or a
        member says ``preemptionPolicy: Never``."""
        core = self.core
        pending = sorted((m for m in core.cache.members(key) if m.pending), key=lambda m: m.name)
        if spec is None or spec.preemption_policy is PreemptionPolicy.NEVER:
            return None
        if not pending or not all(m.preempts for m in pending):
            return None
        needed = max(1, spec.min_count - self.registry.running_count(key))
        if len(pending) < needed:
            return None
        return [Member(m.uid, m.requests) for m in pending[:needed]]

    def _units(self, below: int, exclude: str) -> tuple[list[Unit], dict[str, str]]:
        """Running work of lower priority: each gang whole, each plain pod alone, and each member
        of a gang that may be disrupted member by member (``Single``) alone at its gang's priority;
        and the gang of each unit that is a gang (unit key -> gang key)."""
        core = self.core
        gangs: dict[str, list[PodRecord]] = {}
        units: list[Unit] = []
        for pod in core.cache.pods.values():
            if not runs(pod) or pod.node_name not in core.cache.nodes:
                continue
            spec = core.cache.gang_spec(pod.gang_key) if pod.gang_key else None
            if spec is not None and spec.is_gang:
                if pod.gang_key == exclude:
                    continue
                if not pod_by_pod(core, spec):
                    gangs.setdefault(pod.gang_key or spec.key, []).append(pod)
                    continue
            priority = self._victim_priority(pod, spec)
            if priority < below:
                units.append(Unit(f"pod {pod.key}", priority, ((pod.uid, pod.node_name, pod.requests),)))
        unit_gangs: dict[str, str] = {}
        now = core.clock()
        for key, members in gangs.items():
            priority = self.priority_of(key)
            if priority < below and self._spared.get(key, now) <= now:
                unit_gangs[f"gang {key}"] = key
                units.append(Unit(f"gang {key}", priority,
                                  tuple((m.uid, m.node_name, m.requests) for m in members)))
        return units, unit_gangs

    def _victim_priority(self, pod: PodRecord, spec: GangSpec | None) -> int:
        """A pod victim's priority: a member of a ``Single`` gang ranks as its gang does."""
        return self.priority_of(spec.key) if spec is not None and spec.is_gang else pod.priority

    def _execute(self, state: GangState, priority: int, plan: Displacement,
                 unit_gangs: dict[str, str]) -> None:
        core = self.core
        reason = f"preempted by gang {state.key} (priority {priority})"
        names = [u.key for u in plan.units]
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        domain = "/".join(plan.domain)
        log.warning("preempting", extra={"gang": state.key, "domain": domain, "victims": names})
        core.note(state, "Preempting", f"gang {state.key}: evicting {shown} to fit in {domain}", WARNING)
        victims: set[str] = set()
        victim_gangs: set[str] = set()
        pods = core.cache.pods
        for unit in plan.units:
            victims.update(uid for uid, _, _ in unit.pods)
            key = unit_gangs.get(unit.key)
            if key is not None:
                victim_gangs.add(key)
                self.lifecycle.requeue(self.registry.state(key), f"gang {key}: {reason}", "preempted",
                                       backoff=False, event="Preempted", on_refused=self._victim_refused)
                continue
            pod = pods.get(unit.pods[0][0])
            if pod is not None:
                core.note_pod(pod, "Preempted", f"pod {pod.key}: {reason}", WARNING)
                self.lifecycle.evict([pod], reason)
                self._recount_basic(pod)
        core.metrics.preemptions.labels("gang").inc(len(victim_gangs))
        core.metrics.preemptions.labels("pod").inc(len(plan.units) - len(victim_gangs))
        self.under_way = UnderWay(state.key, core.clock(), frozenset(victims), frozenset(victim_gangs), plan)

    def _recount_basic(self, pod: PodRecord) -> None:
        """A pod evicted alone may still be filed in a group that is no gang (a basic PodGroup, a
        JobSet that asks for none): marked evicting, it no longer runs, and the group's phase
        follows (it said Bound with the pod counted)."""
        state = self.registry.gangs.get(pod.gang_key or "")
        if state is not None:
            self.registry.sync(state)

    def _victim_refused(self, gang: str, note: str) -> None:
        """A budget kept a victim gang from going (none of it was evicted): spare it for a while
        and let the preemptor plan again, with other victims."""
        core = self.core
        now = core.clock()
        self._spared = {k: until for k, until in self._spared.items() if until > now}
        self._spared[gang] = now + SPARED_SECONDS
        work = self.under_way
        if work is None or gang not in work.victim_gangs:
            return
        self.under_way = None
        self._searched.pop(work.gang, None)
        preemptor = self.registry.gangs.get(work.gang)
        if preemptor is not None:
            core.note(preemptor, "EvictionRefused", f"gang {work.gang}: victim gang {gang} kept running "
                                                    f"({note}); looking for other victims", WARNING)
            core.requeue(work.gang, core.pending_members(work.gang), f"victim gang {gang} was spared")
            self._ask_again_after_spare(work.gang)

    def _ask_again_after_spare(self, gang: str) -> None:
        """Plan again for the preemptor once the spared gang may be chosen again, as its next
        ``/preempt`` would: when no other victims would do, nothing else may wake it (a budget
        deleted or relaxed is no event kube-scheduler retries a pod on, and a pod its own filters
        rejected on every node is not retried on the nudge either)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_later(SPARED_SECONDS + 1.0, self._ask_again, gang)

    def _ask_again(self, gang: str) -> None:
        if gang not in self.registry.gangs:
            return
        if self.core.earmarks is not None:
            self.core.earmarks.displace(gang)
        self.core.requeue(gang, self.core.pending_members(gang), "a spared victim gang may be chosen again")

    def check(self) -> list[str]:
        """A victim gang is never left partly running: every running member is being evicted, or
        none is (its evictions are being asked, or a budget refused one)."""
        work = self.under_way
        if work is None:
            return []
        problems = []
        for key in sorted(work.victim_gangs):
            state = self.registry.gangs.get(key)
            evicting = state.evicting if state is not None else set()
            chosen = [m for m in self.core.cache.members(key) if runs(m) and m.uid in work.victims]
            left = [m.name for m in chosen if m.uid not in evicting]
            if left and (len(left) < len(chosen) or not self._spared_or_asked(key)):
                problems.append(f"gang {key}: preempted but {left} left running")
        return problems

    def _spared_or_asked(self, key: str) -> bool:
        return self.lifecycle.checking(key) or self._spared.get(key, 0.0) > self.core.clock()
