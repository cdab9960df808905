"""Where a waiting gang could fit soonest: the domain a head-of-line claim earmarks.

A gang that does not fit now would fit in a domain once enough of what runs there finishes. The
claim picks the domain that *could* hold the gang when empty and misses the least capacity now:

* the level is the gang's required level, or else the lowest level (hosts first, then racks,
  blocks, ...) where some domain could hold the whole gang on its allocatable capacity;
* "capacity missing" is counted in members: the gang's size minus how many copies of its member
  envelope (the largest request of each resource over its members) fit in the domain's free
  capacity now. For the usual gang of identical pods this is exact; for a mixed gang it is a
  conservative estimate (it never claims a domain too small for the envelope);
* ties go to the domain with the least allocatable (the tightest), then to its name.

Pure: a snapshot in, a choice out. Only nodes that could host one member on their allocatable
capacity count (a CPU-only node is no part of a GPU gang's claim).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .apart import Apart
from .model import Member, Resources


@dataclass(frozen=True, slots=True)
class ClaimNode:
    """A node with both what it has and what is free of it now (for this gang)."""

    name: str
    domains: tuple[str, ...]
    allocatable: Resources
    pods_allocatable: int
    free: Resources
    pods_free: int
    ready: bool = True


@dataclass(frozen=True, slots=True)
class ClaimDomain:
    level: int
    domain: tuple[str, ...]  # the path down to ``level``
    nodes: tuple[str, ...]  # the nodes of the domain that could host a member, sorted
    missing: int  # members that do not fit there now (0: the gang fits there already)


def envelope(members: Sequence[Member]) -> dict[str, int]:
    """The largest request of each resource over the members: a shape every member fits in."""
    out: dict[str, int] = {}
    for m in members:
        for name, amount in m.requests.items():
            if amount > out.get(name, 0):
                out[name] = amount
    return out


def copies(free: Mapping[str, int], pods_free: int, shape: Mapping[str, int]) -> int:
    """How many pods of ``shape`` fit into ``free`` (pod slots included)."""
    count = max(pods_free, 0)
    for name, amount in shape.items():
        if amount > 0:
            count = min(count, max(free.get(name, 0), 0) // amount)
    return count


def choose_claim(nodes: Sequence[ClaimNode], members: Sequence[Member], depth: int,
                 required_level: int | None, apart: Apart | None = None) -> ClaimDomain | None:
    """The domain to earmark for the gang, or None when no domain could ever hold it.

    ``apart``: members that repel each other count at most one per domain of the rule's level (a
    domain a running member holds counts none), so a claim is never sized on room they cannot use.
    """
    size = len(members)
    if size == 0 or depth == 0 or (apart is not None and apart.refused):
        return None
    shape = envelope(members)
    hosts = [n for n in nodes if n.ready and len(n.domains) == depth
             and copies(n.allocatable, n.pods_allocatable, shape) > 0]
    levels = [required_level] if required_level is not None else list(range(depth - 1, -1, -1))
    for level in levels:
        choice = _best_at(hosts, shape, size, level, apart)
        if choice is not None:
            return choice
    return None


def _counted(hosts: Sequence[ClaimNode], shape: Mapping[str, int],
             apart: Apart | None) -> dict[str, tuple[int, int]]:
    """Per node, the copies of ``shape`` it counts (when empty, now): with ``apart``, one per
    domain of the rule (kept by the domain's first node by name), none in a domain already held."""
    counted = {n.name: (copies(n.allocatable, n.pods_allocatable, shape), copies(n.free, n.pods_free, shape))
               for n in hosts}
    if apart is None:
        return counted
    seen: dict[tuple[str, ...], str] = {}
    for n in sorted(hosts, key=lambda h: h.name):
        domain = apart.domain_of(n.name, n.domains)
        if not domain or domain in apart.taken:
            counted[n.name] = (0, 0)
            continue
        keeper = seen.setdefault(domain, n.name)
        empty, now = counted[keeper]
        if keeper != n.name:
            mine = counted[n.name]
            counted[keeper], counted[n.name] = (max(empty, mine[0]), max(now, mine[1])), (0, 0)
    return {name: (min(empty, 1), min(now, 1)) for name, (empty, now) in counted.items()}


def _best_at(hosts: Sequence[ClaimNode], shape: Mapping[str, int], size: int,
             level: int, apart: Apart | None = None) -> ClaimDomain | None:
    # domain path -> (copies when empty, copies now, allocatable of the heaviest resource)
    totals: dict[tuple[str, ...], tuple[int, int, int]] = {}
    names: dict[tuple[str, ...], list[str]] = {}
    weight = max(shape.items(), key=lambda kv: (kv[1], kv[0]))[0] if shape else ""
    counted = _counted(hosts, shape, apart)
    for n in hosts:
        path = n.domains[: level + 1]
        if "" in path:
            continue  # a node missing a label belongs to no domain at this level
        empty, now, size_of = totals.get(path, (0, 0, 0))
        totals[path] = (empty + counted[n.name][0], now + counted[n.name][1],
                        size_of + (n.allocatable.get(weight, 0) if weight else n.pods_allocatable))
        names.setdefault(path, []).append(n.name)
    best: tuple[int, int, tuple[str, ...]] | None = None
    for path, (empty, now, size_of) in totals.items():
        if empty < size:
            continue
        key = (max(size - now, 0), size_of, path)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    missing, _, path = best
    return ClaimDomain(level, path, tuple(sorted(names[path])), missing)
