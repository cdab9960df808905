"""Placing a composite gang: several parts, each inside one domain of its own level, all inside
one domain of the composite's level (a CompositePodGroup and its PodGroups).

Each candidate domain of the composite's level is tried in turn, the tightest that holds every
member first; inside it the parts are placed one after another, the largest first, what one takes
gone for the next (``pinned.place_in_turn``). Pure, no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .apart import Apart
from .model import CandidateNode, Member, NoFit, Placement
from .pinned import Turn, place_in_turn
from .placement import place_gang


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a composite: its name (for messages), its members to place, and the level of
    the one domain that must hold them (None: anywhere inside the composite's)."""

    name: str
    members: Sequence[Member]
    required_level: int | None
    within: tuple[str, ...] = ()  # the domain its running members hold (replacements join them)


def place_parts(nodes: Sequence[CandidateNode], parts: Sequence[Part], level_names: Sequence[str],
                required_level: int | None, preferred_level: int | None,
                apart: Apart | None = None) -> Placement | NoFit:
    """Place every part or say why not (for the domain that came closest: the first tried)."""
    ordered = sorted((p for p in parts if p.members), key=lambda p: (-len(p.members), p.name))
    if not ordered:
        return NoFit("no members to place")
    domains = _domains(nodes, ordered, level_names, required_level, preferred_level)
    if isinstance(domains, NoFit):
        return domains
    first_reason = ""
    for domain in domains:
        inside = [n for n in nodes if required_level is None or n.domains[: required_level + 1] == domain]
        result = place_in_turn(_turns(inside, ordered), level_names, preferred_level, apart, same_domain=None)
        if isinstance(result, Placement):
            return Placement(result.assignment, domain or result.domain, result.domains_used)
        first_reason = first_reason or result.reason
    where = "" if required_level is None else f" (in every {level_names[required_level]} that holds them all)"
    return NoFit(f"{first_reason}{where}")


def _turns(inside: Sequence[CandidateNode], parts: Sequence[Part]) -> list[Turn]:
    """Each part on the nodes of the domain it already holds, if any."""
    return [Turn(f"PodGroup {p.name}", [n for n in inside if n.domains[: len(p.within)] == p.within],
                 p.members, p.required_level) for p in parts]


def _domains(nodes: Sequence[CandidateNode], parts: Sequence[Part], level_names: Sequence[str],
             required_level: int | None, preferred_level: int | None) -> list[tuple[str, ...]] | NoFit:
    """The composite's domains to try: the one a single gang of every member would take first (the
    tightest that holds them all), then the others; () alone when it asks for no domain. NoFit when
    no domain holds every member, parts aside."""
    if required_level is None:
        return [()]
    every = [m for p in parts for m in p.members]
    whole = place_gang(nodes, every, level_names, required_level, preferred_level)
    if isinstance(whole, NoFit):
        return whole
    others = sorted({n.domains[: required_level + 1] for n in nodes} - {whole.domain})
    return [whole.domain, *others]
