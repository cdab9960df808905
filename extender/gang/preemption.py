"""Preemption as kube-scheduler proposes it, filtered so it can only ever help a whole gang.

kube-scheduler's preemption is per pod: for a gang member it would evict whatever frees room for
that one member, even when the gang as a whole can never fit (a required rack too small for it),
destroying work for nothing. So for a member of a gang that is not running:

- Quorum plans the *whole* gang against every node's free capacity plus what the proposed victims
  would free. If even that does not fit, nothing is evicted.
- Otherwise only nodes where the plan places members that do not fit without the victims keep
  their victims; every other proposal is dropped.

For every preemptor, victims that would break a gang running at exactly its quorum are vetoed.
"""

from __future__ import annotations

import logging
from typing import Any

from ..cluster.records import PodRecord
from ..cluster.resources import Resources, add_into
from ..topology.placement import NoFit, fits
from .core import Core
from .planning import Freed, Planner

log = logging.getLogger(__name__)

Victims = dict[str, dict[str, Any]]  # node -> {"Pods": [{"UID": ...}], "NumPDBViolations": n}


def veto_gang_breaking(core: Core, victims: Victims) -> Victims:
    """Pass the scheduler's victims through, minus nodes whose eviction would break a gang
    running at exactly its quorum (evicting one member would strand the rest)."""
    out: Victims = {}
    for node, entry in victims.items():
        uids = [p.get("UID", "") for p in entry.get("Pods", [])]
        if not uids or any(_breaks_gang(core, uid) for uid in uids):
            continue
        out[node] = entry
    return out


def gang_aware(core: Core, planner: Planner, pod: PodRecord, victims: Victims) -> Victims:
    """The victims worth evicting for ``pod``: for a gang member, only those its whole gang needs."""
    kept = veto_gang_breaking(core, victims)
    gang = pod.gang_key
    if gang is None:
        return kept
    spec = core.cache.gang_spec(gang)
    if spec is None:
        # A gang Quorum does not know yet (its pods or PodGroup not delivered by the watch): it
        # cannot be judged, so nothing is evicted for it; kube-scheduler tries again later.
        core.metrics.preemptions_refused.inc()
        return {}
    if not spec.is_gang or spec.problem or spec.min_count < 1:
        return kept
    if core.running_count(gang) >= spec.min_count or not kept:
        return kept  # an extra member of a running gang preempts like any pod
    pending = {m.uid: m for m in core.cache.members(gang) if m.pending}
    pending.setdefault(pod.uid, pod)
    bound = [m.node_name for m in core.cache.members(gang) if m.holds_capacity]
    if len(pending) + len(bound) < spec.min_count:
        core.metrics.preemptions_refused.inc()
        return {}  # the gang is not complete: evicting for part of it could never bind it
    freed = _freed(core, kept)
    names = list(core.cache.nodes)
    plan = planner.plan(spec, pending, names, bound, pod.uid, freed=freed)
    if isinstance(plan, NoFit):
        core.metrics.preemptions_refused.inc()
        log.info("preemption refused", extra={"gang": gang, "reason": plan.reason})
        return {}
    # Fewest victims: the shortest prefix of victim nodes (best first) that still lets the gang fit.
    # Fitting only grows with the prefix, so a binary search needs about log2(nodes) plans.
    largest = max(pending.values(), key=lambda m: sum(m.requests.values())).requests
    order = _victim_order(core, planner, spec.required_topology or spec.preferred_topology, freed, largest)
    low, high = 1, len(order)
    while low < high:
        middle = (low + high) // 2
        subset = {n: freed[n] for n in order[:middle]}
        attempt = planner.plan(spec, pending, names, bound, pod.uid, freed=subset)
        if isinstance(attempt, NoFit):
            low = middle + 1
        else:
            high, plan = middle, attempt
    if high < len(order):
        subset_plan = planner.plan(spec, pending, names, bound, pod.uid,
                                   freed={n: freed[n] for n in order[:high]})
        plan = subset_plan if not isinstance(subset_plan, NoFit) else plan
    needed = {node for node in set(plan.assignment.values())
              if node in kept and not _fits_without_victims(core, gang, node, plan.assignment, pending)}
    return {node: kept[node] for node in sorted(needed)}


def _victim_order(core: Core, planner: Planner, level_ref: str | None, freed: Freed,
                  member: Resources) -> list[str]:
    """Victim nodes, best first: fewest victims, then the most members that already fit in their
    domain at the gang's topology level (where the least is missing), then name."""
    level = planner.level(level_ref) if level_ref else None
    room: dict[str, int] = {}
    if level is not None:
        for name, node in core.cache.nodes.items():
            free = core.ledger.free(name, None)
            if free is not None and node.paths[level]:
                room[node.paths[level]] = room.get(node.paths[level], 0) + _copies(free[0], free[1], member)

    def key(name: str) -> tuple[int, int, str]:
        node = core.cache.nodes.get(name)
        fitting = room.get(node.paths[level], 0) if node is not None and level is not None else 0
        return freed[name][1], -fitting, name

    return sorted(freed, key=key)


def _copies(free: Resources, pods_free: int, member: Resources) -> int:
    """How many pods with ``member``'s requests fit into ``free``."""
    copies = max(pods_free, 0)
    for name, amount in member.items():
        if amount > 0:
            copies = min(copies, max(free.get(name, 0), 0) // amount)
    return copies


def _freed(core: Core, victims: Victims) -> Freed:
    out: dict[str, tuple[Resources, int]] = {}
    for node, entry in victims.items():
        total: Resources = {}
        count = 0
        for victim in entry.get("Pods", []):
            record = core.cache.pods.get(victim.get("UID", ""))
            if record is not None and record.holds_capacity and record.node_name == node:
                add_into(total, record.requests)
                count += 1
        out[node] = (total, count)
    return out


def _fits_without_victims(core: Core, gang: str, node: str, assignment: dict[str, str],
                          pending: dict[str, PodRecord]) -> bool:
    free = core.ledger.free(node, gang)
    if free is None:
        return False
    demand: Resources = {}
    count = 0
    for uid, where in assignment.items():
        if where == node:
            add_into(demand, pending[uid].requests)
            count += 1
    return count <= free[1] and fits(free[0], free[1] - count + 1, demand)


def _breaks_gang(core: Core, uid: str) -> bool:
    record = core.cache.pods.get(uid)
    if record is None or record.gang_key is None:
        return False
    spec = core.cache.gang_spec(record.gang_key)
    if spec is None or not spec.is_gang:
        return False
    return core.running_count(record.gang_key) <= spec.min_count
