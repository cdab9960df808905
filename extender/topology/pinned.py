"""Placing a gang whose pods pin their members to different parts of the topology.

A queueing controller that places workloads itself (Kueue's topology-aware scheduling) writes each
pod's domain into the pod's nodeSelector when it lets the pod go: a rack for some members and
another rack for others, or a single host per member when its lowest level is the node.
kube-scheduler then offers each pod only the nodes of its own domain, so a gang planned on what one
member is offered could never hold the others. Here the members are placed group by group, each
group (members pinned alike) on the nodes that match its pins: what a group takes is gone for the
next, the first group placed fixes the required domain for the rest, and members kept apart stay
apart across groups. The most constrained group goes first. Pure, no state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from .apart import Apart
from .model import CandidateNode, Member, NoFit, Placement, Resources
from .placement import place_gang


@dataclass(frozen=True, slots=True)
class PinnedGroup:
    """Members pinned alike, the nodes their pins allow (capacity for this gang), and the pins in
    words for messages ("" for members that pin nothing)."""

    pins: str
    nodes: Sequence[CandidateNode]
    members: Sequence[Member]


def place_pinned(groups: Sequence[PinnedGroup], level_names: Sequence[str], required_level: int | None,
                 preferred_level: int | None, apart: Apart | None = None) -> Placement | NoFit:
    """Place every group or say which one does not fit and why.

    ``Placement.domain`` is the required domain when one is asked, else the first group's domain;
    ``domains_used`` counts the nodes used.
    """
    turns = [Turn(f"members pinned to {g.pins}" if g.pins else "members pinning no node", g.nodes, g.members,
                  required_level)
             for g in sorted(groups, key=lambda g: (len(g.nodes), g.pins))]
    return place_in_turn(turns, level_names, preferred_level, apart, same_domain=required_level)


@dataclass(frozen=True, slots=True)
class Turn:
    """One group of a gang placed in turn: what it is (for messages), the nodes it may use, its
    members, and the level of the one domain that must hold them (None: any nodes)."""

    what: str
    nodes: Sequence[CandidateNode]
    members: Sequence[Member]
    required_level: int | None


def place_in_turn(turns: Sequence[Turn], level_names: Sequence[str], preferred_level: int | None,
                  apart: Apart | None, same_domain: int | None) -> Placement | NoFit:
    """Place the groups one after another, what each takes gone for the next; with ``same_domain``,
    the later groups go inside the first group's domain at that level. ``Placement.domain`` is the
    first group's domain."""
    used: dict[str, tuple[dict[str, int], int]] = {}  # node -> (requests placed, pods placed)
    assignment: dict[str, str] = {}
    domain: tuple[str, ...] = ()
    for turn in turns:
        nodes = [_less(n, used) for n in turn.nodes
                 if same_domain is None or not domain or n.domains[: same_domain + 1] == domain]
        result = place_gang(nodes, turn.members, level_names, turn.required_level, preferred_level, apart)
        if isinstance(result, NoFit):
            return NoFit(f"{turn.what}: {result.reason}")
        by_key = {m.key: m for m in turn.members}
        for key, node in result.assignment.items():
            requests, pods = used.get(node, ({}, 0))
            for name, amount in by_key[key].requests.items():
                requests[name] = requests.get(name, 0) + amount
            used[node] = (requests, pods + 1)
        assignment.update(result.assignment)
        if not domain:
            domain = result.domain
        if apart is not None:
            apart = _taken(apart, result.assignment.values(), nodes)
    return Placement(assignment, domain, len(used))


def _less(node: CandidateNode, used: dict[str, tuple[dict[str, int], int]]) -> CandidateNode:
    """The node with what earlier groups placed on it taken off."""
    taken = used.get(node.name)
    if taken is None:
        return node
    requests, pods = taken
    free: Resources = {name: amount - requests.get(name, 0) for name, amount in node.free.items()}
    return replace(node, free=free, pods_free=node.pods_free - pods)


def _taken(apart: Apart, placed: Iterable[str], nodes: Sequence[CandidateNode]) -> Apart:
    """The rule with the domains of the members just placed taken too."""
    names = set(placed)
    domains = {apart.domain_of(n.name, n.domains) for n in nodes if n.name in names}
    return replace(apart, taken=apart.taken | frozenset(d for d in domains if d))
