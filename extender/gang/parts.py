"""Planning a composite gang part by part (a CompositePodGroup's PodGroups, ``cluster/composites.py``).

What each part still needs to reach its own minCount, and each part's members with the level of the
domain that must hold them and the domain its running members already hold (replacements join
them), for ``topology/composite.place_parts``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..cluster.records import GangSpec, PodRecord
from ..topology.composite import Part
from ..topology.model import Member
from .core import Core


def part_needs_of(core: Core, spec: GangSpec) -> dict[str, int]:
    """How many more members each part needs to reach its minCount (bound or binding count)."""
    inflight = core.ledger.inflight()
    running: dict[str, int] = {}
    for m in core.cache.members(spec.key):
        if (m.holds_capacity and not m.deleting) or m.uid in inflight:
            running[m.part] = running.get(m.part, 0) + 1
    return {p.key: p.min_count - running.get(p.key, 0) for p in spec.parts}


def composite_parts(core: Core, spec: GangSpec, group: list[PodRecord],
                    level: Callable[[str | None], int | None]) -> list[Part]:
    """The members of ``group`` as the parts they belong to."""
    by_part: dict[str, list[Member]] = {}
    for m in group:
        by_part.setdefault(m.part, []).append(Member(m.uid, m.requests, m.rank))
    levels = {p.key: level(p.required_topology) for p in spec.parts}
    held = _part_domains(core, spec.key, levels)
    return [Part(key.partition("/")[2], members, levels.get(key), held.get(key, ()))
            for key, members in by_part.items()]


def _part_domains(core: Core, key: str, levels: Mapping[str, int | None]) -> dict[str, tuple[str, ...]]:
    """The domain each part's running members hold at the part's level."""
    nodes, out = core.cache.nodes, {}
    for m in core.cache.members(key):
        level = levels.get(m.part)
        node = nodes.get(m.node_name) if m.node_name and m.part not in out else None
        if level is not None and node is not None and not m.terminal and not m.deleting and \
                node.domains[level]:
            out[m.part] = node.domains[: level + 1]
    return out
