"""Packing internals of whole-gang placement: node groups per domain, engines, the nested walk.

See ``placement.py`` for the algorithm; this module holds its moving parts. Pure, no state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import groupby

from .model import Member, Resources, fits

# ---------------------------------------------------------------------------------------------------
# Internal model

# Group identity for tie-breaks: (0, labelled path) sorts before (1, (node name,)) for unlabelled nodes.
_Key = tuple[int, tuple[str, ...]]
# A member's non-zero requests, sorted.
_Shape = tuple[tuple[str, int], ...]
# Request totals, and one member per distinct shape.
_Need = tuple[dict[str, int], list[tuple[_Shape, Member]]]


@dataclass(slots=True)
class _Node:
    name: str
    domains: tuple[str, ...]
    free: Resources
    pods: int
    cap: int  # upper bound on members that fit (exact count for homogeneous gangs)
    dfree: int  # free amount of the dominant resource


@dataclass(slots=True)
class _Group:
    key: _Key
    nodes: list[_Node]
    cap: int
    dfree: int
    # Caches for the heterogeneous bound (groups are re-tested inside loops).
    sums: dict[str, int] | None = None
    hosts: dict[_Shape, bool] | None = None

    def free_of(self, name: str) -> int:
        """Total free ``name`` across the group's nodes."""
        if self.sums is None:
            self.sums = {}
        have = self.sums.get(name)
        if have is None:
            have = self.sums[name] = sum(n.free.get(name, 0) for n in self.nodes)
        return have

    def hosts_one(self, shape: _Shape, requests: Resources) -> bool:
        """Whether some node of the group fits one member of this shape on its own."""
        if self.hosts is None:
            self.hosts = {}
        ok = self.hosts.get(shape)
        if ok is None:
            ok = self.hosts[shape] = any(fits(n.free, n.pods, requests) for n in self.nodes)
        return ok


_Pairs = list[tuple[Member, _Node]]
_Fill = tuple[_Pairs, list[Member]]  # (placed, unplaced)
_Place = Callable[[_Group, list[Member]], _Fill]


def _group(key: _Key, nodes: list[_Node]) -> _Group:
    cap = 0
    dfree = 0
    for n in nodes:
        cap += n.cap
        dfree += n.dfree
    return _Group(key, nodes, cap, dfree)


class _Engine:
    """How member counts, bounds and leaf packing work; one subclass per gang shape."""

    def leaf(self, node: _Node, members: list[Member]) -> _Fill:
        raise NotImplementedError

    def need(self, members: list[Member]) -> _Need:
        """What ``bound`` compares against, computed once per set of members."""
        raise NotImplementedError

    def bound(self, group: _Group, members: list[Member], need: _Need) -> bool:
        """Cheap test that must pass for ``group`` to hold all ``members``."""
        raise NotImplementedError

    def order_key(self, group: _Group) -> tuple[int, int, _Key]:
        """Sort key putting the largest child first."""
        raise NotImplementedError

    def nodes_estimate(self, group: _Group, members: list[Member]) -> int:
        """Nodes needed to hold ``members`` inside ``group`` (tie-break only)."""
        raise NotImplementedError

    def rescue(self, nodes: list[_Node], members: list[Member]) -> _Fill | None:
        """A second, topology-blind attempt when the nested walk found no fit (None: not needed)."""
        return None


class _Homogeneous(_Engine):
    def leaf(self, node: _Node, members: list[Member]) -> _Fill:
        k = min(node.cap, len(members))
        return [(m, node) for m in members[:k]], members[k:]

    def need(self, members: list[Member]) -> _Need:
        return {}, []

    def bound(self, group: _Group, members: list[Member], need: _Need) -> bool:
        return group.cap >= len(members)  # exact

    def order_key(self, group: _Group) -> tuple[int, int, _Key]:
        return (-group.cap, group.dfree, group.key)

    def nodes_estimate(self, group: _Group, members: list[Member]) -> int:
        need = len(members)
        used = 0
        for cap in sorted((n.cap for n in group.nodes), reverse=True):
            if need <= 0:
                break
            need -= cap
            used += 1
        return used


class _Heterogeneous(_Engine):
    def __init__(
        self, members: Sequence[Member], dominant: str | None, scale: Mapping[str, int], pods_scale: int
    ) -> None:
        self.shape_of = {m.key: _requests_shape(m.requests) for m in members}
        self.dominant = dominant
        # total supply per requested resource (and of pod slots), to compare leftovers across resources
        self.scale = scale
        self.pods_scale = max(pods_scale, 1)

    def leaf(self, node: _Node, members: list[Member]) -> _Fill:
        free = dict(node.free)
        pods = node.pods
        placed: _Pairs = []
        rest: list[Member] = []
        for m in members:
            if fits(free, pods, m.requests):
                for name, amount in m.requests.items():
                    if amount > 0:
                        free[name] = free.get(name, 0) - amount
                pods -= 1
                placed.append((m, node))
            else:
                rest.append(m)
        return placed, rest

    def need(self, members: list[Member]) -> _Need:
        shapes: dict[_Shape, Member] = {}
        for m in members:
            shapes.setdefault(self.shape_of[m.key], m)
        return _totals(members), list(shapes.items())

    def bound(self, group: _Group, members: list[Member], need: _Need) -> bool:
        # group.cap is at most the group's pod slots, so it also bounds by pods.
        if group.cap < len(members):
            return False
        total, shapes = need
        if not all(group.free_of(name) >= amount for name, amount in total.items()):
            return False
        # per-node test: a member too large for every single node rules the group out
        return all(group.hosts_one(shape, m.requests) for shape, m in shapes)

    def order_key(self, group: _Group) -> tuple[int, int, _Key]:
        return (-group.dfree, -group.cap, group.key)

    def nodes_estimate(self, group: _Group, members: list[Member]) -> int:
        if self.dominant is None:
            need = len(members)
        else:
            need = sum(m.requests.get(self.dominant, 0) for m in members)
        used = 0
        for dfree in sorted((n.dfree for n in group.nodes), reverse=True):
            if need <= 0:
                break
            need -= dfree
            used += 1
        return max(used, 1)

    def rescue(self, nodes: list[_Node], members: list[Member]) -> _Fill | None:
        # Item-oriented best-fit decreasing: each member (largest first) goes to the node it leaves
        # tightest, leftovers (pod slots included) normalised by supply and summed over resources. It
        # finds fits the node-by-node walk misses when a small member takes the only spot a larger one
        # could use.
        usable = [n for n in nodes if n.cap > 0]
        frees = [dict(n.free) for n in usable]
        pods = [n.pods for n in usable]
        placed: _Pairs = []
        rest: list[Member] = []
        for m in members:
            best = -1
            best_key: tuple[float, str] | None = None
            for i, n in enumerate(usable):
                if fits(frees[i], pods[i], m.requests):
                    free = frees[i]
                    score = (pods[i] - 1) / self.pods_scale + sum(
                        (free.get(r, 0) - m.requests.get(r, 0)) / s for r, s in self.scale.items()
                    )
                    if best_key is None or (score, n.name) < best_key:
                        best, best_key = i, (score, n.name)
            if best < 0:
                rest.append(m)
                continue
            for name, amount in m.requests.items():
                if amount > 0:
                    frees[best][name] = frees[best].get(name, 0) - amount
            pods[best] -= 1
            placed.append((m, usable[best]))
        return placed, rest


# ---------------------------------------------------------------------------------------------------
# Grouping and the recursive walk


def _child_groups(nodes: list[_Node], level: int, depth: int) -> list[_Group]:
    """Children of a node set one level down; past the last level each node is its own child."""
    if level >= depth:
        return [_Group((0, (n.name,)), [n], n.cap, n.dfree) for n in nodes]
    buckets: dict[str, list[_Node]] = {}
    groups: list[_Group] = []
    for n in nodes:
        value = n.domains[level]
        if value:
            buckets.setdefault(value, []).append(n)
        else:  # unknown location: a domain of its own, so using it costs one more domain
            groups.append(_Group((1, (n.name,)), [n], n.cap, n.dfree))
    groups.extend(_group((0, (value,)), ns) for value, ns in buckets.items())
    return groups


def _domain_groups(nodes: list[_Node], level: int) -> list[_Group]:
    """Domains at ``level`` by full path; unlabelled nodes belong to none."""
    buckets: dict[tuple[str, ...], list[_Node]] = {}
    end = level + 1
    for n in nodes:
        if n.domains[level]:
            buckets.setdefault(n.domains[:end], []).append(n)
    return [_group((0, path), ns) for path, ns in buckets.items()]


def _tightness_order(groups: list[_Group], members: list[Member], engine: _Engine) -> list[_Group]:
    """Tightest first: least free dominant resource, then fewest nodes needed, then name."""
    ordered = sorted(groups, key=lambda g: (g.dfree, g.key))
    out: list[_Group] = []
    for _, tier_iter in groupby(ordered, key=lambda g: g.dfree):
        tier = list(tier_iter)
        if len(tier) > 1:
            tier.sort(key=lambda g: (engine.nodes_estimate(g, members), g.key))
        out += tier
    return out


def _tightest_of(groups: list[_Group], members: list[Member], engine: _Engine) -> _Group:
    """The tightest of ``groups`` (non-empty), estimating nodes only for groups tied on free."""
    least = min(g.dfree for g in groups)
    tied = [g for g in groups if g.dfree == least]
    if len(tied) == 1:
        return tied[0]
    return min(tied, key=lambda g: (engine.nodes_estimate(g, members), g.key))


def _tightest(
    groups: Sequence[_Group], members: list[Member], engine: _Engine, place: _Place
) -> tuple[_Group, _Pairs] | None:
    """The tightest group that holds every member, with its packing; None when none does."""
    need = engine.need(members)
    candidates = [g for g in groups if engine.bound(g, members, need)]
    if not candidates:
        return None
    first = _tightest_of(candidates, members, engine)
    placed, rest = place(first, members)  # always succeeds for homogeneous gangs (exact bound)
    if not rest:
        return first, placed
    for g in _tightness_order(candidates, members, engine):
        if g is not first:
            placed, rest = place(g, members)
            if not rest:
                return g, placed
    return None


def _fill_group(group: _Group, members: list[Member], *, level: int, engine: _Engine, depth: int) -> _Fill:
    return _fill(group.nodes, level, members, engine, depth)


def _fill(nodes: list[_Node], level: int, members: list[Member], engine: _Engine, depth: int) -> _Fill:
    """Place as many members as possible in ``nodes`` using the fewest children at each level."""
    if not members:
        return [], []
    if len(nodes) == 1:
        return engine.leaf(nodes[0], members)
    children = [g for g in _child_groups(nodes, level, depth) if g.cap > 0]
    if not children:
        return [], members
    if len(children) == 1:
        return _fill(children[0].nodes, level + 1, members, engine, depth)
    # Each child is filled at most once and what it takes is kept, so the walk stays linear in the
    # number of nodes even when (heterogeneous) bounds are optimistic.
    remaining = sorted(children, key=engine.order_key)
    placed: _Pairs = []
    rest = members
    while rest and remaining:
        need = engine.need(rest)
        holders = [g for g in remaining if engine.bound(g, rest, need)]
        child = _tightest_of(holders, rest, engine) if holders else remaining[0]
        remaining.remove(child)
        got, rest = _fill(child.nodes, level + 1, rest, engine, depth)
        placed += got
    return placed, rest


def _place_within(
    nodes: list[_Node], top: int, start: int, members: list[Member], engine: _Engine, depth: int
) -> tuple[_Pairs, list[Member], tuple[str, ...] | None, int]:
    """Lowest single domain (searching from ``start`` up to ``top``) that fits, else spread from ``top``."""
    for level in range(start, top - 1, -1):
        place = partial(_fill_group, level=level + 1, engine=engine, depth=depth)
        hit = _tightest(_domain_groups(nodes, level), members, engine, place)
        if hit is not None:
            return hit[1], [], hit[0].key[1], level
    placed, rest = _fill(nodes, top, members, engine, depth)
    if rest and engine.bound(_group((0, ()), nodes), members, engine.need(members)):  # rescue is O(n*m)
        second = engine.rescue(nodes, members)
        if second is not None and not second[1]:
            return second[0], [], None, -1
    return placed, rest, None, -1


def _place_in_domain(
    group: _Group, members: list[Member], *, top: int, start: int, engine: _Engine, depth: int
) -> _Fill:
    placed, rest, _, _ = _place_within(group.nodes, top, start, members, engine, depth)
    return placed, rest


def _requests_shape(requests: Resources) -> _Shape:
    return tuple(sorted((k, v) for k, v in requests.items() if v > 0))


def _totals(members: Sequence[Member]) -> dict[str, int]:
    total: dict[str, int] = {}
    for m in members:
        for name, amount in m.requests.items():
            if amount > 0:
                total[name] = total.get(name, 0) + amount
    return total
