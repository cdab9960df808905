"""A gang whose members share one device claim: every member on the node that holds its devices.

A claim several members share (a PodGroup's ``spec.resourceClaims``) is allocated once, from
devices of one node when they are node-local; every pod using it can only run there. One member
carries the claim's devices in its requests, so the node chosen holds them once. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from .apart import Apart
from .model import CandidateNode, Member, NoFit, Placement, fits
from .placement import place_gang


def place_on_one_node(candidates: Sequence[CandidateNode], members: Sequence[Member],
                      level_names: Sequence[str], required_level: int | None, preferred_level: int | None,
                      apart: Apart | None, why: str) -> Placement | NoFit:
    """The first candidate node that holds every member, or how many the best one holds.

    ``why`` names the shared claim; the no-fit says it with the shortfall."""
    best = 0
    for node in candidates:
        held = members_held(node, members)
        if held == len(members):
            result = place_gang([node], members, level_names, required_level, preferred_level, apart)
            if isinstance(result, Placement):
                return result
            held -= 1  # the members fit by capacity, not by what keeps them apart
        best = max(best, held)
    return NoFit(f"{why}, so all {len(members)} members must run on one node; "
                 f"the best candidate node holds {best}")


def members_held(node: CandidateNode, members: Sequence[Member]) -> int:
    """How many of the members, in order, the node's free capacity holds."""
    free = dict(node.free)
    pods_free = node.pods_free
    for held, member in enumerate(members):
        if not fits(free, pods_free, member.requests):
            return held
        for name, amount in member.requests.items():
            free[name] = free.get(name, 0) - amount
        pods_free -= 1
    return len(members)
