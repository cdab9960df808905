"""Replacements for a running sliced gang: lost members go back where their slices are.

A sliced gang (``slices``) is cut into slices of ``slice_size`` members, each slice inside one domain
at ``slice_level``; several slices may share a domain, and the last slice may be smaller. When some
members of a running gang are lost, the survivors stay where they are, so a domain whose count of
survivors is not a whole number of slices has a slice with a hole in it; a replacement must go
into that domain, or the slice would be split across domains.

The rule, per slice domain ``d`` with ``c_d`` survivors: ``(-c_d) mod slice_size`` replacements
must go there (the holes). When the gang's last slice is smaller (``r = size mod slice_size``), one
domain holding at most ``r`` more than whole slices may hold that last slice, and needs only what
it lacks. Replacements
beyond the holes form whole slices of their own, placed as a sliced gang is placed from scratch.
If a hole cannot be filled (its domain has no room left, or lost the node), no replacement is
placed: the caller's recovery timeout requeues the gang whole, as for a required domain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .model import CandidateNode, Member, NoFit, Placement
from .placement import place_gang
from .slices import _reduced, place_sliced

__all__ = ["place_replacements_in_slices", "slice_holes"]

_Path = tuple[str, ...]


def slice_holes(survivors: Sequence[_Path], slice_size: int, gang_size: int) -> dict[_Path, int]:
    """Replacements each slice domain needs so its survivors make whole slices again.

    ``survivors``: the slice-domain path of each surviving member. When the gang's last slice is
    smaller (``r = gang_size mod slice_size``), the first domain (by path) whose survivors are at
    most ``r`` more than whole slices is taken to hold it, and needs only what that slice lacks.
    Whichever domain held it before, the holes never add up to more than the members lost.
    """
    counts = Counter(survivors)
    last = gang_size % slice_size
    holes: dict[_Path, int] = {}
    partial_taken = False
    for path in sorted(counts):
        extra = counts[path] % slice_size
        if extra == 0:
            continue
        if not partial_taken and extra <= last:
            partial_taken = True
            need = last - extra
        else:
            need = slice_size - extra
        if need:
            holes[path] = need
    return holes


def place_replacements_in_slices(
    candidates: Sequence[CandidateNode],
    members: Sequence[Member],
    level_names: Sequence[str],
    slice_level: int,
    slice_size: int,
    survivors: Sequence[_Path],
) -> Placement | NoFit:
    """Place ``members`` (replacements) so that with ``survivors`` the gang is whole slices again.

    Holes are filled first, each inside its own slice domain; members left over are placed as
    new slices with ``place_sliced``. Either every member is placed or none (``NoFit``).
    """
    if slice_size < 1:
        raise ValueError(f"slice_size {slice_size} must be at least 1")
    holes = slice_holes(survivors, slice_size, len(survivors) + len(members))
    wanted = sum(holes.values())
    if wanted > len(members):
        return NoFit(f"{len(members)} replacement(s) cannot complete the survivors' slices: "
                     f"{wanted} member(s) missing in {len(holes)} {level_names[slice_level]}(s)")
    nodes = {n.name: n for n in candidates}
    assignment: dict[str, str] = {}
    queue = list(members)
    for path, count in sorted(holes.items()):
        hole, queue = queue[:count], queue[count:]
        inside = [n for n in nodes.values() if n.domains[: slice_level + 1] == path]
        result = place_gang(inside, hole, level_names, None, None)
        if isinstance(result, NoFit):
            return NoFit(f"the slice in {level_names[slice_level]} {'/'.join(path)} cannot take its "
                         f"{count} replacement(s) back: {result.reason}")
        _take(nodes, hole, result.assignment)
        assignment.update(result.assignment)
    if queue:
        rest = place_sliced(list(nodes.values()), queue, level_names, None, None, slice_level, slice_size)
        if isinstance(rest, NoFit):
            return rest
        assignment.update(rest.assignment)
    return Placement(assignment, (), len({nodes[n].domains[: slice_level + 1] for n in assignment.values()}))


def _take(nodes: dict[str, CandidateNode], members: Sequence[Member], assignment: dict[str, str]) -> None:
    """Take what ``members`` use out of the nodes they were assigned to."""
    by_node: dict[str, list[Member]] = {}
    for m in members:
        by_node.setdefault(assignment[m.key], []).append(m)
    for name, placed in by_node.items():
        nodes[name] = _reduced(nodes[name], placed)
