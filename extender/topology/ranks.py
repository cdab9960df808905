"""Rank order: which member of a placed gang takes which of the placement's slots.

Collective communication (rings, trees) runs in rank order, so ranks that talk to each other should
share a node, then a rack. The search decides how many members go on each node; this module only
hands those slots out again, consecutive ranks to consecutive slots, with nodes ordered by their
domain path (block, rack, host) and then name, so that the nodes of one rack are adjacent.

Members are only exchanged with members of identical requests: that keeps every node's total, so a
placement stays exactly as good (and as valid) as the search made it. Members without a rank keep
the slots after the ranked ones; a class of members none of which has a rank is left as it was.
Pure and O(m log m) per placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .model import Member, Resources


def _shape(requests: Resources) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, v) for k, v in requests.items() if v > 0))


def rank_sorted(members: Sequence[Member]) -> list[Member]:
    """Ranked members by rank, then the unranked ones in their given order (stable)."""
    return sorted(members, key=lambda m: (not m.rank, m.rank))


def rank_assignment(members: Sequence[Member], assignment: Mapping[str, str],
                    domains: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """``assignment`` with members of identical requests exchanged so that consecutive ranks take
    consecutive slots, slots ordered by the node's ``domains`` path and then its name.

    Every node keeps the same number of members of each request shape, so the totals the search
    checked are unchanged. Keys of ``assignment`` are those of ``members``.
    """
    classes: dict[tuple[tuple[str, int], ...], list[Member]] = {}
    for m in members:
        classes.setdefault(_shape(m.requests), []).append(m)
    out = dict(assignment)
    for group in classes.values():
        if len(group) < 2 or not any(m.rank for m in group):
            continue
        slots = sorted((assignment[m.key] for m in group), key=lambda node: (domains[node], node))
        for m, node in zip(rank_sorted(group), slots, strict=True):
            out[m.key] = node
    return out
