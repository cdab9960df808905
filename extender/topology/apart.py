"""Members that must not share a domain: required anti-affinity among a gang's own members.

A gang whose members repel each other (one worker per host, one per rack) cannot be packed: a
packed plan is refused by kube-scheduler's own filter, member after member. Placement therefore
models the rule: at most one member per domain of one level. The pod spec is read once, when the
pod record is built (``MembersApart``); planning resolves it against the configured levels and the
members already running (``Apart``); ``keep_apart`` narrows the candidates so that the ordinary
search can only place one member per domain. Pure, no state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from .model import CandidateNode, Member, fits

HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class MembersApart:
    """What one pod's spec says about its gang mates: the topology keys of which each domain may
    hold at most one of them, and what it asks that placement does not model ("" when nothing)."""

    keys: tuple[str, ...] = ()
    problem: str = ""


@dataclass(frozen=True, slots=True)
class Apart:
    """The rule as placement applies it: at most one member per domain at ``level`` (``None``: per
    node), and the domains (paths cut at ``level``, or ``(node name,)``) members already hold."""

    level: int | None
    taken: frozenset[tuple[str, ...]] = frozenset()
    label: str = HOSTNAME_LABEL  # the topology key, for messages
    refused: str = ""  # why the members' rule is not modelled: the gang is refused with this reason

    def domain_of(self, name: str, domains: tuple[str, ...]) -> tuple[str, ...]:
        """The domain a node belongs to at the rule's level; ``()`` when it has no label there."""
        if self.level is None:
            return (name,)
        return domains[: self.level + 1] if domains[self.level] else ()


class _Repelling(Protocol):
    """A member as planning knows it (a pod record): what its spec says about its mates."""

    @property
    def apart(self) -> MembersApart | None: ...


class _Located(Protocol):
    """A node as planning knows it (a node record): its label at each level."""

    @property
    def domains(self) -> tuple[str, ...]: ...


def _keys_of(members: Iterable[_Repelling]) -> set[str] | str:
    """Every topology key the members keep apart on, or the first thing one asks that is not modelled."""
    keys: set[str] = set()
    for member in members:
        rule = member.apart
        if rule is not None and rule.problem:
            return rule.problem
        if rule is not None:
            keys.update(rule.keys)
    return keys


def resolve_apart(members: Iterable[_Repelling], level_labels: Sequence[str], running: Iterable[str],
                  nodes: Mapping[str, _Located]) -> Apart | None:
    """The rule for a gang from its members' rules; ``None`` when they do not repel each other.

    ``level_labels`` are the node labels of the configured levels, highest first; ``running`` the
    nodes where members already run (looked up in ``nodes``). Several keys: the highest level wins
    (one member per rack also means one per host). The host label need not be a configured level.
    A member asking for what is not modelled gives a rule that refuses the gang and says why.
    """
    keys = _keys_of(members)
    if isinstance(keys, str):
        return Apart(None, refused=f"members' {keys}: not modelled by gang placement")
    if not keys:
        return None
    unknown = sorted(k for k in keys if k not in level_labels and k != HOSTNAME_LABEL)
    if unknown:
        return Apart(None, refused=f"members' required anti-affinity has topologyKey {unknown[0]!r}, "
                     f"neither the host label nor a configured level ({', '.join(level_labels)}): not "
                     "modelled by gang placement")
    level = min((level_labels.index(k) for k in keys if k in level_labels), default=None)
    apart = Apart(level, label=level_labels[level] if level is not None else HOSTNAME_LABEL)
    located = ((name, nodes[name].domains) for name in running if name in nodes)
    taken = frozenset(d for d in (apart.domain_of(name, domains) for name, domains in located) if d)
    return replace(apart, taken=taken)


def keep_apart(candidates: Sequence[CandidateNode], members: Sequence[Member],
               apart: Apart) -> list[CandidateNode]:
    """Candidates on which any search places at most one member per domain of the rule.

    Each node offers one pod slot; a domain above the host is represented by one node of it (the one
    that fits the most members, then the one with the least free, then by name: the tightest fit).
    Domains where a member already runs, and nodes without the rule's label, are left out.
    """
    best: dict[tuple[str, ...], tuple[tuple[int, int, str], CandidateNode]] = {}
    for c in candidates:
        domain = apart.domain_of(c.name, c.domains) if len(c.domains) > (apart.level or 0) else ()
        if not domain or domain in apart.taken or c.pods_free < 1:
            continue
        one = c if c.pods_free == 1 else replace(c, pods_free=1)
        if apart.level is None or apart.level == len(c.domains) - 1:
            best[(c.name,)] = ((0, 0, ""), one)
            continue
        rank = (-sum(1 for m in members if fits(c.free, 1, m.requests)), sum(c.free.values()), c.name)
        held = best.get(domain)
        if held is None or rank < held[0]:
            best[domain] = (rank, one)
    return [node for _, node in best.values()]


def apart_reason(apart: Apart, reason: str) -> str:
    """A shortfall sentence that says members were kept apart (the counts are per domain then)."""
    if apart.level is None or apart.label == HOSTNAME_LABEL:
        where = "node"
    else:
        where = f"{apart.label} domain"
    return f"{reason} (at most one member per {where}: required anti-affinity between members)"
