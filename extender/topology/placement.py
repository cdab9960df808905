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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from .apart import Apart, apart_reason, keep_apart
from .model import CandidateNode, Member, NoFit, Placement, Resources, fits, format_quantity, format_resources
from .packing import (
    _domain_groups,
    _Engine,
    _fill,
    _Heterogeneous,
    _Homogeneous,
    _Node,
    _Pairs,
    _place_in_domain,
    _place_within,
    _requests_shape,
    _tightest,
    _totals,
)
from .ranks import rank_assignment

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


# ---------------------------------------------------------------------------------------------------
# Gang shape


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
    apart: Apart | None = None,
) -> Placement | NoFit:
    """Place the whole gang or explain exactly why not.

    ``required_level``: every member in one domain at that level (the tightest that fits);
    ``Placement.domain`` is that domain's path.
    ``preferred_level`` or neither: the lowest single domain that fits, searched from the level
    above the host (or the host level itself when that is the preference) up to the top; otherwise
    spread over the fewest domains, nested. ``Placement.domain`` is the path cut at the preferred
    level (or the higher domain actually used when the preference could not be met), ``()`` when the
    gang is spread or nothing was asked. Both may be given ("require a block, prefer a rack"): the
    tightest preferred domain that fits wins wherever it is (it lies inside one required domain),
    and only when none fits is the gang spread inside the tightest required domain; the result's
    ``domain`` is the required domain either way. ``apart``: at most one member per domain of its
    level (members repel each other), none where a member already runs. Raises ValueError for
    inconsistent input (level out of range, wrong number of domain labels, duplicate member keys);
    node names are assumed unique.
    """
    depth = len(level_names)
    if depth == 0:
        raise ValueError("level_names must name at least one level")
    _validate(members, depth, required_level, preferred_level)
    if apart is not None:
        return _kept_apart(candidates, members, level_names, required_level, preferred_level, apart)
    if required_level is not None and preferred_level is not None and preferred_level > required_level:
        inside = _preferred_first(candidates, members, level_names, required_level, preferred_level)
        if inside is not None:
            return inside
    if not members:
        return Placement({}, (), 0)
    if not candidates:
        return NoFit("no candidate nodes passed the scheduler's filters")
    search = _search_over(candidates, members, depth, preferred_level)
    if isinstance(search, NoFit):
        return search
    outcome = (search.required(required_level, level_names[required_level]) if required_level is not None
               else search.anywhere(len(members), preferred_level))
    if isinstance(outcome, NoFit):
        return outcome
    placed, domain = outcome
    return _placement(members, placed, domain, depth)


def _kept_apart(
    candidates: Sequence[CandidateNode], members: Sequence[Member], level_names: Sequence[str],
    required_level: int | None, preferred_level: int | None, apart: Apart,
) -> Placement | NoFit:
    """The same search over one node per domain of the rule, each offering one pod slot."""
    if apart.refused:
        return NoFit(apart.refused)
    result = place_gang(keep_apart(candidates, members, apart), members, level_names, required_level,
                        preferred_level)
    return NoFit(apart_reason(apart, result.reason)) if isinstance(result, NoFit) else result


def _placement(members: Sequence[Member], placed: _Pairs, domain: tuple[str, ...], depth: int) -> Placement:
    """The search's pairs as a Placement, members in the order they were given, in rank order
    over the chosen slots."""
    by_key = {m.key: n.name for m, n in placed}
    if any(m.rank for m in members):
        by_key = rank_assignment(members, by_key, {n.name: n.domains for _, n in placed})
    assignment = {m.key: by_key[m.key] for m in members}
    used = {n.domains[: depth - 1] if depth > 1 else (n.name,) for _, n in placed}
    return Placement(assignment, domain, len(used))


def _preferred_first(
    candidates: Sequence[CandidateNode], members: Sequence[Member], level_names: Sequence[str],
    required_level: int, preferred_level: int,
) -> Placement | None:
    """The tightest preferred domain that fits anywhere inside a required one, or None.

    The tightest required domain may be one where the preference cannot be met while another meets
    it: so the preferred domain is looked for first, anywhere (it lies inside a required one).
    """
    depth = len(level_names)
    labelled = [c for c in candidates if len(c.domains) == depth and c.domains[required_level]]
    inside = place_gang(labelled, members, level_names, preferred_level, None)
    if isinstance(inside, Placement):
        return Placement(inside.assignment, inside.domain[: required_level + 1], inside.domains_used)
    return None


def _search_over(candidates: Sequence[CandidateNode], members: Sequence[Member], depth: int,
                 preferred_level: int | None) -> _Search | NoFit:
    """The gang's shape measured against the snapshot, ready to be searched; NoFit when one member
    of a heterogeneous gang fits no node at all."""
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
        oversized = _oversized_member(engine, ordered, nodes)
        if oversized is not None:  # the whole story; say so instead of counting
            return NoFit(f"{head}; no candidate node fits one pod of {format_resources(oversized)}")
    return _Search(nodes, ordered, engine, depth, start, head, homogeneous)


def _oversized_member(engine: _Engine, ordered: list[Member], nodes: list[_Node]) -> dict[str, int] | None:
    """The requests of a member too large for every node, if there is one."""
    for shape, m in engine.need(ordered)[1]:
        if not any(fits(n.free, n.pods, m.requests) for n in nodes):
            return dict(shape)
    return None
