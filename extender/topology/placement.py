"""Whole-gang topology placement: a pure function over one snapshot of candidate nodes.

A gang is placed all at once so that members never hold capacity that the rest cannot join, and so
that fragmentation is judged per node ("8 free GPUs" spread one per node across racks is not a rack
with 8 GPUs). Nothing here does I/O or keeps state; callers pass free capacity that already accounts
for bound pods and other gangs' reservations.

Vocabulary used below:

* **level** -- index into ``level_names`` and ``CandidateNode.domains``, highest first. The last level
  is treated as the host level.
* **domain at level l** -- the nodes sharing ``domains[:l + 1]``; a node whose label at ``l`` is ``""``
  belongs to no domain at that level.
* **dominant resource** -- the gang's scarcest resource: the one maximising total gang request over
  total free amount across all candidates (pod slots count as a resource, so a gang of zero-request
  pods is dominated by pod slots). Ties go to the resource name.
* **tightness** -- a domain fits more tightly when it has less free dominant resource in total, i.e.
  leaves less over after the gang is placed. Ties: fewest nodes needed, then domain name.

Algorithm (the same for every set of nodes, applied recursively down the levels):

1. If some child domain can hold every remaining member, use the tightest such child.
2. Otherwise take the largest child (most member copies it can hold), fill it, and repeat.

At the host level the children are single nodes, so this packs onto the fewest nodes and fills the
last node best-fit (it prefers an already-fragmented node over breaking into an empty one). Because
step 2 always takes the largest child, the number of children used per level is minimal, giving
"fewest racks inside the fewest blocks".

Homogeneous gangs (the common case) are solved exactly by counting how many copies of the member fit
on each node; a domain fits iff the sum of those counts reaches the gang size, so no domain is ever
packed just to learn that it does not fit. Heterogeneous gangs use the same walk with first-fit-
decreasing packing (largest member first), pruned by aggregate and count upper bounds, and when that
finds nothing a topology-blind best-fit-decreasing pass over the same nodes. Bin packing is NP-hard,
so for heterogeneous gangs this can report NoFit where a fit exists (rarely, in contrived cases); a
returned Placement always respects every node's capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import groupby

Resources = Mapping[str, int]

__all__ = [
    "CandidateNode",
    "Member",
    "NoFit",
    "Placement",
    "Resources",
    "fits",
    "format_quantity",
    "format_resources",
    "place_gang",
]


@dataclass(frozen=True, slots=True)
class CandidateNode:
    """A node that passed kube-scheduler's filters, with capacity left for this gang."""

    name: str
    domains: tuple[str, ...]
    free: Resources
    pods_free: int


@dataclass(frozen=True, slots=True)
class Member:
    """One gang member (a pod uid, or ``placeholder-N`` for members not created yet)."""

    key: str
    requests: Resources


@dataclass(frozen=True, slots=True)
class Placement:
    """Every member assigned to a node; ``domain`` is the path chosen at the constraint level."""

    assignment: dict[str, str]
    domain: tuple[str, ...]
    domains_used: int


@dataclass(frozen=True, slots=True)
class NoFit:
    """The gang cannot be placed; ``reason`` states the exact shortfall for humans."""

    reason: str


# ---------------------------------------------------------------------------------------------------
# Small public helpers


def fits(free: Resources, pods_free: int, requests: Resources) -> bool:
    """Whether one pod with ``requests`` fits into ``free`` with a pod slot to spare (hot path)."""
    if pods_free < 1:
        return False
    for name, amount in requests.items():
        if amount > 0 and free.get(name, 0) < amount:
            return False
    return True


_BYTE_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_FIRST = {"cpu": 0, "memory": 1}


def _is_bytes(name: str) -> bool:
    return name in ("memory", "ephemeral-storage") or name.startswith("hugepages-")


def format_quantity(name: str, amount: int) -> str:
    """Render one canonical amount the way people write it: ``4``/``500m`` cpu, ``8Gi`` memory."""
    if name == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if _is_bytes(name) and amount:
        for suffix, unit in _BYTE_UNITS:
            if amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def format_resources(r: Resources) -> str:
    """Readable ``{cpu: 4, memory: 8Gi, nvidia.com/gpu: 1}``; zero entries are left out."""
    items = sorted(((k, v) for k, v in r.items() if v), key=lambda kv: (_FIRST.get(kv[0], 2), kv[0]))
    return "{" + ", ".join(f"{k}: {format_quantity(k, v)}" for k, v in items) + "}"


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


# ---------------------------------------------------------------------------------------------------
# Gang shape


def _totals(members: Sequence[Member]) -> dict[str, int]:
    total: dict[str, int] = {}
    for m in members:
        for name, amount in m.requests.items():
            if amount > 0:
                total[name] = total.get(name, 0) + amount
    return total


def _requests_shape(requests: Resources) -> _Shape:
    return tuple(sorted((k, v) for k, v in requests.items() if v > 0))


def _dominant(supply: Mapping[str, int], total: Mapping[str, int], count: int, pods: int) -> str | None:
    """Scarcest resource of the gang (None = pod slots), compared exactly by cross-multiplication."""
    best: str | None = None
    best_need, best_have = count, pods
    for name in sorted(total):
        need, have = total[name], supply[name]
        # need/have > best_need/best_have, treating have == 0 as infinite scarcity
        if have <= 0:
            better = best_have > 0
        elif best_have <= 0:
            better = False
        else:
            better = need * best_have > best_need * have
        if better:
            best, best_need, best_have = name, need, have
    return best


_TIMES = "\N{MULTIPLICATION SIGN}"
# How many domains a heterogeneous shortfall message examines (the count is a summary, not a proof).
_HETERO_REPORT_DOMAINS = 16


def _summary(members: Sequence[Member], homogeneous: bool, total: Mapping[str, int]) -> str:
    if homogeneous:
        return f"needs {len(members)} {_TIMES} {format_resources(members[0].requests)}"
    return f"needs {len(members)} pods (total {format_resources(total)})"


def _validate(
    members: Sequence[Member], depth: int, required_level: int | None, preferred_level: int | None
) -> None:
    for what, level in (("required_level", required_level), ("preferred_level", preferred_level)):
        if level is not None and not 0 <= level < depth:
            raise ValueError(f"{what} {level} outside 0..{depth - 1}")
    if len({m.key for m in members}) != len(members):
        raise ValueError("duplicate member keys")


def _build_nodes(
    candidates: Sequence[CandidateNode], depth: int, per_member: Mapping[str, int]
) -> tuple[list[_Node], dict[str, int], int]:
    """One pass over the snapshot: node records with member counts, plus supply of each requested resource.

    ``per_member`` maps every requested resource to the smallest request among members (0 when some
    member does not request it); that count is exact for a homogeneous gang and an upper bound otherwise.
    """
    nodes: list[_Node] = []
    resources = list(per_member.items())
    sums = [0] * len(resources)
    pods = 0
    for c in candidates:
        if len(c.domains) != depth:
            raise ValueError(f"node {c.name} has {len(c.domains)} domain labels, expected {depth}")
        free = c.free
        cap = c.pods_free
        if cap > 0:
            pods += cap
        else:
            cap = 0
        i = 0
        for name, amount in resources:
            have = free.get(name, 0)
            if have > 0:
                sums[i] += have
            if amount:
                copies = have // amount
                if copies < cap:
                    cap = copies if copies > 0 else 0
            i += 1
        nodes.append(_Node(c.name, c.domains, free, c.pods_free, cap, 0))
    return nodes, {name: sums[i] for i, (name, _) in enumerate(resources)}, pods


def _engine_for(members: Sequence[Member], homogeneous: bool, dominant: str | None,
                supply: Mapping[str, int], pods: int) -> tuple[_Engine, list[Member]]:
    """The packing engine for the gang's shape, and the order members are packed in."""
    if homogeneous:
        return _Homogeneous(), list(members)
    # Largest first (share of total supply summed over resources), for first-fit decreasing.
    scale = {name: max(have, 1) for name, have in supply.items()}
    ordered = sorted(
        members, key=lambda m: (-sum(v / scale[k] for k, v in m.requests.items() if v > 0), m.key)
    )
    return _Heterogeneous(members, dominant, scale, pods), ordered


@dataclass(slots=True)
class _Search:
    """The two ways of placing a gang over one snapshot: inside one required domain, or anywhere."""

    nodes: list[_Node]
    ordered: list[Member]
    engine: _Engine
    depth: int
    start: int
    head: str
    homogeneous: bool

    def required(self, r: int, label: str) -> tuple[_Pairs, tuple[str, ...]] | NoFit:
        groups = _domain_groups(self.nodes, r)
        place = partial(_place_in_domain, top=r + 1, start=self.start, engine=self.engine, depth=self.depth)
        hit = _tightest(groups, self.ordered, self.engine, place)
        if hit is not None:
            chosen, placed = hit
            return placed, chosen.key[1]
        if not groups:
            return NoFit(f"{self.head}; best {label} fits 0 (no candidate node has a {label} label)")
        if self.homogeneous:
            best = max(g.cap for g in groups)  # exact: no group reached the gang size
        else:  # what the nested walk manages in the domains with the largest count bounds
            best = 0
            for g in sorted(groups, key=lambda g: (-g.cap, g.key))[:_HETERO_REPORT_DOMAINS]:
                if g.cap <= best:
                    break
                best = max(best, len(_fill(g.nodes, r + 1, self.ordered, self.engine, self.depth)[0]))
        return NoFit(f"{self.head}; best {label} fits {best}")

    def anywhere(self, size: int, preferred_level: int | None) -> tuple[_Pairs, tuple[str, ...]] | NoFit:
        if self.homogeneous and sum(n.cap for n in self.nodes) < size:  # exact, and skips the walk
            return NoFit(f"{self.head}; candidate nodes fit {sum(n.cap for n in self.nodes)}")
        placed, rest, path, found = _place_within(self.nodes, 0, self.start, self.ordered, self.engine,
                                                  self.depth)
        if rest:
            return NoFit(f"{self.head}; candidate nodes fit {len(placed)}")
        if path is None or preferred_level is None:
            return placed, ()
        return placed, (path[: preferred_level + 1] if found >= preferred_level else path)


# ---------------------------------------------------------------------------------------------------
# Entry point


def place_gang(
    candidates: Sequence[CandidateNode],
    members: Sequence[Member],
    level_names: Sequence[str],
    required_level: int | None,
    preferred_level: int | None,
) -> Placement | NoFit:
    """Place the whole gang or explain exactly why not.

    ``required_level``: every member in one domain at that level (the tightest that fits);
    ``Placement.domain`` is that domain's path.
    ``preferred_level`` or neither: the lowest single domain that fits, searched from the level
    above the host (or the host level itself when that is the preference) up to the top; otherwise
    spread over the fewest domains, nested. ``Placement.domain`` is the path cut at the preferred
    level (or the higher domain actually used when the preference could not be met), ``()`` when the
    gang is spread or nothing was asked. Both may be given: the preference then applies inside the
    required domain. Raises ValueError for inconsistent input (level out of range, wrong number of
    domain labels, duplicate member keys); node names are assumed unique.
    """
    depth = len(level_names)
    if depth == 0:
        raise ValueError("level_names must name at least one level")
    _validate(members, depth, required_level, preferred_level)
    if not members:
        return Placement({}, (), 0)
    if not candidates:
        return NoFit("no candidate nodes passed the scheduler's filters")

    total = _totals(members)
    shape = _requests_shape(members[0].requests)
    homogeneous = all(_requests_shape(m.requests) == shape for m in members[1:])
    per_member = {name: max(min(m.requests.get(name, 0) for m in members), 0) for name in sorted(total)}
    nodes, supply, pods = _build_nodes(candidates, depth, per_member)
    dominant = _dominant(supply, total, len(members), pods)
    for n in nodes:
        d = n.pods if dominant is None else n.free.get(dominant, 0)
        n.dfree = d if d > 0 else 0

    engine, ordered = _engine_for(members, homogeneous, dominant, supply, pods)
    # Where the bottom-up "lowest single domain" search begins: just above the host level, or the
    # host level itself when the preference names it (or it is the only level).
    start = depth - 1 if depth == 1 or preferred_level == depth - 1 else depth - 2
    head = _summary(members, homogeneous, total)
    if not homogeneous:
        # A member too large for every node is the whole story; say so instead of counting.
        for shape, m in engine.need(ordered)[1]:
            if not any(fits(n.free, n.pods, m.requests) for n in nodes):
                return NoFit(f"{head}; no candidate node fits one pod of {format_resources(dict(shape))}")

    search = _Search(nodes, ordered, engine, depth, start, head, homogeneous)
    outcome = (search.required(required_level, level_names[required_level]) if required_level is not None
               else search.anywhere(len(members), preferred_level))
    if isinstance(outcome, NoFit):
        return outcome
    placed, domain = outcome
    by_key = {m.key: n.name for m, n in placed}
    assignment = {m.key: by_key[m.key] for m in members}
    used = {n.domains[: depth - 1] if depth > 1 else (n.name,) for _, n in placed}
    return Placement(assignment, domain, len(used))
