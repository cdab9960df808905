"""Which lower-priority work to displace so that a waiting gang fits: whole units, fewest first.

A *unit* is what may only be evicted together: every running member of a gang, or one plain pod.
The search looks at one domain at a time, at the level ``topology.claims`` would claim (the gang's
required level, else the lowest level that could hold it empty). In each domain it adds units
lowest priority first (then the ones freeing the most member slots there, then the smallest), until
the gang's member envelope fits ``size`` times; then it drops again every unit the fit does not
need, newest first. The domain chosen needs the fewest units, then the lowest highest priority
among them, then evicts the fewest pods.

Capacity is counted as in ``topology.claims``: copies of the member envelope per node, exact for a
gang of identical pods and conservative for a mixed one. A unit's pods outside the domain are
evicted too (a gang goes whole) but free nothing the gang uses there. Pure and bounded: at most
``MAX_UNITS_PER_DOMAIN`` units are considered per domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .claims import ClaimNode, copies, envelope
from .model import Member, Resources

MAX_UNITS_PER_DOMAIN = 256


@dataclass(frozen=True, slots=True)
class Unit:
    """Work that is evicted whole: (pod uid, node, requests) of each of its running pods."""

    key: str
    priority: int
    pods: tuple[tuple[str, str, Resources], ...]


@dataclass(frozen=True, slots=True)
class Displacement:
    level: int
    domain: tuple[str, ...]
    nodes: tuple[str, ...]  # the domain's nodes that could host a member (what the gang claims)
    units: tuple[Unit, ...]  # what to evict, in the order chosen


def choose_victims(nodes: Sequence[ClaimNode], units: Sequence[Unit], members: Sequence[Member], depth: int,
                   required_level: int | None, per_node: int | None = None) -> Displacement | None:
    """The cheapest displacement that lets the gang fit in one domain, or None. ``per_node``: at
    most that many members count on a node (members that repel each other), however much it frees."""
    size = len(members)
    cap = per_node if per_node is not None else 1 << 30
    if size == 0 or depth == 0:
        return None
    shape = envelope(members)
    hosts = {n.name: n for n in nodes if n.ready and len(n.domains) == depth
             and copies(n.allocatable, n.pods_allocatable, shape) > 0}
    levels = [required_level] if required_level is not None else list(range(depth - 1, -1, -1))
    for level in levels:
        holding = _domains_holding(hosts.values(), level, shape, size, cap)
        if holding:  # else no domain at this level could ever hold it: look one level up
            return _cheapest(level, holding, units, shape, size, cap)
    return None


def _domains_holding(hosts: Iterable[ClaimNode], level: int, shape: Mapping[str, int],
                     size: int, cap: int) -> dict[tuple[str, ...], list[ClaimNode]]:
    """The domains at ``level`` whose hosts could hold the whole gang once emptied."""
    domains: dict[tuple[str, ...], list[ClaimNode]] = {}
    for n in hosts:
        path = n.domains[: level + 1]
        if "" not in path:
            domains.setdefault(path, []).append(n)
    return {p: ns for p, ns in domains.items()
            if sum(min(copies(n.allocatable, n.pods_allocatable, shape), cap) for n in ns) >= size}


def _cheapest(level: int, holding: Mapping[tuple[str, ...], list[ClaimNode]], units: Sequence[Unit],
              shape: Mapping[str, int], size: int, cap: int) -> Displacement | None:
    """The domain needing the fewest units, then the lowest highest priority, then the fewest pods
    evicted (then the first path)."""
    best: tuple[tuple[int, int, int, tuple[str, ...]], Displacement] | None = None
    for path, members_nodes in sorted(holding.items()):
        chosen = _displace_in(members_nodes, units, shape, size, cap)
        if chosen is None:
            continue
        key = (len(chosen), max((u.priority for u in chosen), default=0),
               sum(len(u.pods) for u in chosen), path)
        if best is None or key < best[0]:
            names = tuple(sorted(n.name for n in members_nodes))
            best = (key, Displacement(level, path, names, tuple(chosen)))
    return best[1] if best is not None else None


def _displace_in(domain: Sequence[ClaimNode], units: Sequence[Unit], shape: Mapping[str, int],
                 size: int, cap: int) -> list[Unit] | None:
    free = {n.name: (dict(n.free), n.pods_free) for n in domain}

    def room() -> int:
        return sum(min(copies(f, p, shape), cap) for f, p in free.values())

    if room() >= size:
        return []  # it fits already: nothing to displace here
    inside = [u for u in units if any(node in free for _, node, _ in u.pods)]

    def gain(unit: Unit) -> int:
        return sum(1 for _, node, _ in unit.pods if node in free)

    inside.sort(key=lambda u: (u.priority, -gain(u), len(u.pods), u.key))
    chosen: list[Unit] = []
    for unit in inside[:MAX_UNITS_PER_DOMAIN]:
        _apply(free, unit, +1)
        chosen.append(unit)
        if room() >= size:
            break
    else:
        return None
    for unit in reversed(chosen[:-1]):  # the last one was needed to reach the fit
        _apply(free, unit, -1)
        if room() >= size:
            chosen.remove(unit)
        else:
            _apply(free, unit, +1)
    return chosen


def _apply(free: dict[str, tuple[dict[str, int], int]], unit: Unit, sign: int) -> None:
    """Add (``sign`` +1) or take back (-1) what the unit's pods in the domain would free."""
    for _, node, requests in unit.pods:
        if node not in free:
            continue
        resources, pods = free[node]
        for name, amount in requests.items():
            resources[name] = resources.get(name, 0) + sign * amount
        free[node] = (resources, pods + sign)
