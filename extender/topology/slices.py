"""Slice-aware whole-gang placement: Kueue's ``podset-slice-required-topology`` + ``podset-slice-size``.

The gang is cut into slices of ``slice_size`` consecutive members (the last may be smaller); each slice
must sit inside one domain at ``slice_level`` (a rack: where a slice's members talk to each other), and
slices may share a domain. The gang may also be required in, or prefer, one domain, as in ``place_gang``.

``place_gang`` packs inside a domain; this module only decides which slices go to which slice domain,
following ``place_gang``'s walk one level up: the tightest slice domain holding every remaining slice,
else the one holding the most slices, repeated. A slice tries domains already in use before a new one.

Homogeneous gangs are decided by counting: a domain holds ``copies`` members (per node, the copies its
free resources and pod slots allow, summed), i.e. ``copies // size`` full slices, and a smaller last
slice needs ``copies % size`` room somewhere or a slot of its own. Placing it last keeps this exact:
NoFit only when no assignment exists. Heterogeneous gangs go greedily, largest slice first, each packed
into what earlier slices left (reduced node copies): capacity is never exceeded, a fit can be missed.
Work is O(domains x slices) ``place_gang`` calls at most.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .apart import Apart
from .model import CandidateNode, Member, NoFit, Placement, Resources, format_resources
from .packing import _requests_shape, _totals
from .placement import _dominant, place_gang
from .ranks import rank_sorted

__all__ = ["place_sliced"]

_TIMES = "\N{MULTIPLICATION SIGN}"
_Path = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Gang:
    """What stays fixed during one call: levels, slice shape, and how tightness is measured."""

    levels: Sequence[str]
    slice_level: int
    slice_size: int
    last: int  # size of the last slice when it is smaller than slice_size, else 0
    unit: Resources | None  # the member's requests when the gang is homogeneous
    dominant: str | None  # scarcest resource; None = pod slots
    total: dict[str, int]  # what the whole gang requests
    members: Sequence[Member]
    slices: list[list[Member]]  # in placement order

    def dfree(self, nodes: Sequence[CandidateNode]) -> int:
        """Free dominant resource of ``nodes``: less is tighter."""
        if self.dominant is None:
            return sum(max(n.pods_free, 0) for n in nodes)
        return sum(max(n.free.get(self.dominant, 0), 0) for n in nodes)


def _copies(node: CandidateNode, unit: Resources) -> int:
    """How many members with requests ``unit`` fit on ``node`` (resources and pod slots)."""
    cap = max(node.pods_free, 0)
    for name, amount in unit.items():
        if amount > 0:
            cap = min(cap, max(node.free.get(name, 0) // amount, 0))
    return cap


def _reduced(node: CandidateNode, members: Sequence[Member]) -> CandidateNode:
    """``node`` with ``members``' requests and pod slots taken out (CandidateNode is frozen)."""
    free = dict(node.free)
    for m in members:
        for name, amount in m.requests.items():
            if amount > 0:
                free[name] = free.get(name, 0) - amount
    return replace(node, free=free, pods_free=node.pods_free - len(members))


def _groups(nodes: Sequence[CandidateNode], level: int) -> list[tuple[_Path, list[CandidateNode]]]:
    """Domains at ``level`` by full path, sorted by path; unlabelled nodes belong to none."""
    buckets: dict[_Path, list[CandidateNode]] = {}
    for n in nodes:
        if n.domains[level]:
            buckets.setdefault(n.domains[: level + 1], []).append(n)
    return sorted(buckets.items())


@dataclass(slots=True)
class _Domain:
    """One slice domain and what is left of it after the slices given to it so far."""

    path: _Path
    nodes: dict[str, CandidateNode]
    copies: int  # members it still holds (homogeneous gangs only)
    totals: dict[str, int]  # free amount of each requested resource
    pods: int
    dominant: str | None

    def tight(self) -> tuple[int, _Path]:
        """Sort key, tightest first: least free dominant resource, then path."""
        return (self.pods if self.dominant is None else self.totals[self.dominant]), self.path

    def bound(self, count: int, need: Resources) -> bool:
        """Cheap test that must pass for ``count`` members needing ``need`` in total to fit."""
        return self.pods >= count and all(self.totals[name] >= amount for name, amount in need.items())

    def take(self, gang: _Gang, members: list[Member], need: Resources, out: dict[str, str]) -> bool:
        """Pack ``members`` into what is left (all of them or none), recording them in ``out``."""
        if not self.bound(len(members), need) or (gang.unit is not None and self.copies < len(members)):
            return False  # the copies count is exact for homogeneous gangs; both save a packing
        result = place_gang(list(self.nodes.values()), members, gang.levels, gang.slice_level, None)
        if isinstance(result, NoFit):
            return False
        on: dict[str, list[Member]] = {}
        for m in members:
            on.setdefault(result.assignment[m.key], []).append(m)
        for name, placed in on.items():
            self.nodes[name] = _reduced(self.nodes[name], placed)
        self.copies -= len(members)
        self.pods -= len(members)
        for name, amount in need.items():
            self.totals[name] -= amount
        out.update(result.assignment)
        return True


def _domains(gang: _Gang, nodes: Sequence[CandidateNode]) -> list[_Domain]:
    """Slice domains of ``nodes``, largest first (most full slices, then a gap for the last one)."""
    out = []
    for path, group in _groups(nodes, gang.slice_level):
        copies = sum(_copies(n, gang.unit) for n in group) if gang.unit is not None else 0
        totals = {name: sum(max(n.free.get(name, 0), 0) for n in group) for name in gang.total}
        pods = sum(max(n.pods_free, 0) for n in group)
        out.append(_Domain(path, {n.name: n for n in group}, copies, totals, pods, gang.dominant))
    if gang.unit is None:
        return sorted(out, key=lambda d: (-d.tight()[0], d.path))
    size, last = gang.slice_size, gang.last
    return sorted(out, key=lambda d: (-(d.copies // size), -(0 < last <= d.copies % size), d.tight()))


def _spread(gang: _Gang, nodes: Sequence[CandidateNode]) -> tuple[dict[str, str], int]:
    """Give each slice a slice domain inside ``nodes``; the assignment and how many slices were placed.

    A slice that fits nowhere is skipped so the count says how many could be placed (for NoFit).
    """
    slices = gang.slices
    unused = _domains(gang, nodes)
    used: list[_Domain] = []
    out: dict[str, str] = {}
    placed = 0
    needs = [_totals(piece) for piece in slices]
    rests = _rests(gang, needs)
    for i, piece in enumerate(slices):
        if any(d.take(gang, piece, needs[i], out) for d in sorted(used, key=_Domain.tight)):
            placed += 1
            continue
        count, total = rests[i]
        holders = [d for d in sorted(unused, key=_Domain.tight) if d.bound(count, total)]
        if holders:  # the tightest domain holding all the rest
            rest = [m for later in slices[i:] for m in later]
            if any(d.take(gang, rest, total, out) for d in holders):
                return out, placed + len(slices) - i
        opened = next((d for d in unused if d.take(gang, piece, needs[i], out)), None)  # else the largest
        if opened is not None:
            unused.remove(opened)
            used.append(opened)
            placed += 1
    return out, placed


def _rests(gang: _Gang, needs: list[dict[str, int]]) -> list[tuple[int, dict[str, int]]]:
    """What ``slices[i:]`` need (pods, resources) for every i, and nothing after the last."""
    rests = [(0, dict.fromkeys(gang.total, 0))]  # built from the end
    for piece, need in zip(reversed(gang.slices), reversed(needs), strict=True):
        count, total = rests[-1]
        rests.append((count + len(piece), {name: total[name] + need.get(name, 0) for name in total}))
    rests.reverse()
    return rests


def _in_scope(
    gang: _Gang, nodes: Sequence[CandidateNode], preferred: int | None
) -> tuple[dict[str, str] | None, int]:
    """Place the gang inside ``nodes``: one slice domain, else one preferred domain, else spread."""
    members, slices = gang.members, gang.slices
    inner = preferred if preferred is not None and preferred > gang.slice_level else None
    if any(d.bound(len(members), gang.total) for d in _domains(gang, nodes)):  # spares a costly NoFit
        whole = place_gang(nodes, members, gang.levels, gang.slice_level, inner)
        if isinstance(whole, Placement):
            return whole.assignment, len(slices)
    if len(slices) == 1:
        return None, 0
    if preferred is not None and preferred < gang.slice_level:
        # a preferred domain above the slice level spans slice domains (below it, only a single slice
        # domain meets the preference, and none holds the gang)
        for _, group in sorted(_groups(nodes, preferred), key=lambda pg: (gang.dfree(pg[1]), pg[0])):
            out, count = _spread(gang, group)
            if count == len(slices):
                return out, count
    out, count = _spread(gang, nodes)
    return (out if count == len(slices) else None), count


def _validate(
    candidates: Sequence[CandidateNode], members: Sequence[Member], depth: int, levels: dict[str, int | None]
) -> None:
    """The checks place_gang makes, for every level given (it would see only some of them)."""
    if depth == 0:
        raise ValueError("level_names must name at least one level")
    for what, level in levels.items():
        if level is not None and not 0 <= level < depth:
            raise ValueError(f"{what} {level} outside 0..{depth - 1}")
    if len({m.key for m in members}) != len(members):
        raise ValueError("duplicate member keys")
    for c in candidates:
        if len(c.domains) != depth:
            raise ValueError(f"node {c.name} has {len(c.domains)} domain labels, expected {depth}")


def _gang(
    candidates: Sequence[CandidateNode],
    members: Sequence[Member],
    levels: Sequence[str],
    slice_level: int,
    slice_size: int,
) -> _Gang:
    """Shape the gang once: homogeneity, dominant resource (as place_gang picks it), slices in order."""
    total = _totals(members)
    shape = _requests_shape(members[0].requests)
    homogeneous = all(_requests_shape(m.requests) == shape for m in members[1:])
    supply = {name: sum(max(c.free.get(name, 0), 0) for c in candidates) for name in total}
    pods = sum(max(c.pods_free, 0) for c in candidates)
    dominant = _dominant(supply, total, len(members), pods)
    unit = members[0].requests if homogeneous else None
    # Homogeneous slices hold consecutive ranks (any split of identical members packs alike).
    chunked = rank_sorted(members) if unit is not None else members
    slices = [list(chunked[i : i + slice_size]) for i in range(0, len(members), slice_size)]
    if unit is None:  # largest first; homogeneous slices stay in order (the smaller last one last)
        slices.sort(key=lambda s: (-(_totals(s).get(dominant, 0) if dominant else len(s)), -len(s)))
    last = len(members) % slice_size
    return _Gang(levels, slice_level, slice_size, last, unit, dominant, total, members, slices)


def _shortfall(gang: _Gang, candidates: Sequence[CandidateNode], required: int | None, best: int) -> str:
    """The NoFit sentence, worded like place_gang's, counting slices: most placed in any scope."""
    members = gang.members
    label = gang.levels[gang.slice_level]
    if gang.unit is not None:
        head = f"needs {len(members)} {_TIMES} {format_resources(gang.unit)}"
    else:
        head = f"needs {len(members)} pods (total {format_resources(_totals(members))})"
    head += f" in slices of {gang.slice_size} per {label}"
    if not any(c.domains[gang.slice_level] for c in candidates):
        return f"{head}; no candidate node has a {label} label"
    fit = f"{best} slice" + ("" if best == 1 else "s")
    if required is None:
        return f"{head}; candidate nodes fit {fit}"
    outer = gang.levels[required]
    if not any(c.domains[required] for c in candidates):
        return f"{head}; best {outer} fits {fit} (no candidate node has a {outer} label)"
    return f"{head}; best {outer} fits {fit}"


def place_sliced(
    candidates: Sequence[CandidateNode],
    members: Sequence[Member],
    level_names: Sequence[str],
    required_level: int | None,
    preferred_level: int | None,
    slice_level: int,
    slice_size: int,
    apart: Apart | None = None,
) -> Placement | NoFit:
    """Place the whole gang, each slice of ``slice_size`` consecutive members in one ``slice_level`` domain.

    ``required_level``: the gang in one domain at that level, the tightest that fits (its path is
    ``Placement.domain``); at or below ``slice_level`` it implies the slices, so this is ``place_gang``.
    ``preferred_level``: best effort, inside the required domain: a single slice domain if one holds
    the gang, else the tightest preferred domain that holds all slices, else spread over the fewest
    slice domains. ``Placement.domain`` is the required path, else the preferred path when met, else
    ``()``. Raises ValueError for inconsistent input, as ``place_gang`` does, and for a bad slice.
    Members kept ``apart`` are not modelled inside slices: such a gang is refused, saying so.
    """
    if apart is not None:
        return NoFit(apart.refused or "members kept apart by required anti-affinity, in slices: "
                     "not modelled by gang placement")
    depth = len(level_names)
    levels = dict(required_level=required_level, preferred_level=preferred_level, slice_level=slice_level)
    _validate(candidates, members, depth, levels)
    if slice_size < 1:
        raise ValueError(f"slice_size {slice_size} must be at least 1")
    if required_level is not None and slice_level <= required_level:
        return place_gang(candidates, members, level_names, required_level, preferred_level)
    if not members:
        return Placement({}, (), 0)
    if not candidates:
        return NoFit("no candidate nodes passed the scheduler's filters")

    gang = _gang(candidates, members, level_names, slice_level, slice_size)
    preferred = preferred_level
    if preferred is not None and required_level is not None and preferred <= required_level:
        preferred = None  # met by the requirement
    scopes = (
        [((), list(candidates))]
        if required_level is None
        else sorted(_groups(candidates, required_level), key=lambda pg: (gang.dfree(pg[1]), pg[0]))
    )
    best = 0
    for path, nodes in scopes:
        out, count = _in_scope(gang, nodes, preferred)
        if out is not None:
            return _placement(gang, candidates, out, path, preferred)
        best = max(best, count)
    return NoFit(_shortfall(gang, candidates, required_level, best))


def _placement(
    gang: _Gang, candidates: Sequence[CandidateNode], out: dict[str, str], path: _Path, preferred: int | None
) -> Placement:
    """The assignment in member order, the domain reported, and the domains used as place_gang counts them."""
    depth = len(gang.levels)
    by_name = {c.name: c for c in candidates}
    assignment = {m.key: out[m.key] for m in gang.members}
    hosts = [by_name[name] for name in set(assignment.values())]
    domain = path
    if not domain and preferred is not None:
        paths = {n.domains[: preferred + 1] for n in hosts}
        if len(paths) == 1 and next(iter(paths))[preferred]:
            domain = next(iter(paths))
    used = {n.domains[: depth - 1] if depth > 1 else (n.name,) for n in hosts}
    return Placement(assignment, domain, len(used))
