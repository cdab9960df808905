"""Whole-gang planning: candidate nodes with ledger capacity, placement, reservation, repair.

The search itself is ``topology.placement.place_gang`` (pure); this module builds its input from
the ledger, remembers no-fit answers while nothing they depend on moves, and turns a placement
into reservations.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from ..cluster.pins import Pins, describe, node_matches, pinned_nodes, topology_pins
from ..cluster.records import GangSpec, PodRecord
from ..cluster.resources import Resources, add
from ..topology.apart import Apart, resolve_apart
from ..topology.colocated import place_on_one_node
from ..topology.composite import place_parts
from ..topology.pinned import PinnedGroup, place_pinned
from ..topology.placement import CandidateNode, Member, NoFit, Placement, format_resources, place_gang
from ..topology.slice_repair import place_replacements_in_slices
from ..topology.slices import place_sliced
from .core import Core
from .parts import composite_parts, part_needs_of
from .registry import GangRegistry
from .state import ClaimEpoch, GangState, NoFitMemo, note_reserved

log = logging.getLogger(__name__)

# Capacity that would come free per node: (resources, pod slots).
Freed = Mapping[str, tuple[Resources, int]]


def honour_nominations(assignment: Mapping[str, str], pending: Mapping[str, PodRecord], offered: set[str],
                       first_uid: str | None) -> dict[str, str]:
    """The same placement with members of equal requests swapped, so that a member nominated to a
    node of the placement is reserved there, and the member being filtered gets a node it was
    offered (see ``Planner.with_mates_nominations``). Swapping equal requests keeps every node's
    total unchanged; only members with the same nodeSelector swap (it may pin them); members that
    cannot be matched keep their place."""
    out = dict(assignment)
    pinned = {uid for uid, node in out.items() if pending[uid].nominated_node == node}

    def swap_into(uid: str, eligible: Callable[[str], bool]) -> bool:
        for other, node in out.items():
            if other != uid and other not in pinned and eligible(node) and \
                    pending[other].requests == pending[uid].requests and \
                    pending[other].node_selector == pending[uid].node_selector:
                out[uid], out[other] = node, out[uid]
                return True
        return False

    for uid in sorted(out):
        want = pending[uid].nominated_node
        if uid not in pinned and want and swap_into(uid, want.__eq__):
            pinned.add(uid)
    if first_uid in out and out[first_uid] not in offered and first_uid not in pinned:
        swap_into(first_uid, lambda node: node in offered)
    return out


def _short_of(minimum: tuple[tuple[str, int], ...], nodes: list[CandidateNode]) -> str:
    """Why the candidate nodes cannot hold the gang's declared minimum resources, or "" (an early
    answer: no placement is searched for a gang that cannot fit in total)."""
    for name, amount in minimum:
        have = sum(n.free.get(name, 0) for n in nodes)
        if have < amount:
            return (f"needs minResources {format_resources({name: amount})}; candidate nodes have "
                    f"{format_resources({name: have}) if have else 'none free'}")
    return ""


def _attempts(pending: Mapping[str, PodRecord], first_uid: str | None, needed: int,
              part_needs: Mapping[str, int] | None = None) -> list[list[PodRecord]]:
    """The groups to place, in turn: every pending member (the filtered one first), then just
    enough for quorum (for a composite, just enough for each part's)."""
    ordered = sorted(pending.values(), key=lambda m: (m.uid != first_uid, not _carries(m), m.name))
    attempts = [ordered]
    if part_needs is not None:
        enough = _enough_per_part(ordered, part_needs)
        if enough and len(enough) < len(ordered):
            attempts.append(enough)
    elif 0 < needed < len(ordered):  # none needed (already at quorum): no empty "placement"
        attempts.append(ordered[:needed])
    return attempts


def _carries(member: PodRecord) -> bool:
    """Whether the member carries the devices of a claim its gang shares (placed in every attempt)."""
    return member.shared_claim is not None and member.shared_claim.carrier


def _carrier_of(group: list[PodRecord]) -> str:
    return next((m.uid for m in group if _carries(m)), "")


def _enough_per_part(ordered: list[PodRecord], needs: Mapping[str, int]) -> list[PodRecord]:
    """The first members of each part, as many as the part still needs."""
    taken: dict[str, int] = {}
    out = []
    for m in ordered:
        if taken.get(m.part, 0) < needs.get(m.part, 0):
            taken[m.part] = taken.get(m.part, 0) + 1
            out.append(m)
    return out


def fingerprint(candidates: list[str]) -> tuple[int, int]:
    """Identifies a set of node names whatever their order (kube-scheduler's varies between calls).

    A no-fit holds only for the nodes it was computed against: kube-scheduler's own cache can lag
    Quorum's, so an early retry may offer fewer nodes than a later one.
    """
    return len(candidates), hash(frozenset(candidates))  # ~0.1 ms at 5,000 nodes, only on a no-fit


class Planner:
    def __init__(self, core: Core, registry: GangRegistry, claims: ClaimEpoch) -> None:
        self.core = core
        self.registry = registry
        self.level_names = tuple(level.name for level in core.config.levels)
        self.level_labels = tuple(level.node_label for level in core.config.levels)
        self._claims = claims

    def level(self, ref: str | None) -> int | None:
        return None if ref is None else self.core.config.level_index(ref)

    def level_error(self, spec: GangSpec) -> str:
        """Why the gang's required topology cannot be honoured, or "" when it can.

        An unknown *preferred* level is only a preference that cannot be met: it is ignored.
        """
        asked = [("required topology", spec.required_topology), ("slice topology", spec.slice_topology),
                 *((f"PodGroup {p.key}'s required topology", p.required_topology) for p in spec.parts)]
        for what, ref in asked:
            if ref and self.level(ref) is None:
                return (f"gang {spec.key}: {what} {ref!r} is not a configured level "
                        f"({', '.join(self.level_names)})")
        return ""

    def fit_version(self, key: str) -> tuple[int, ...]:
        """Moves whenever capacity, reservations or the gang's own demand change; a cached no-fit
        stays valid until then (status updates of rejected pods do not invalidate it)."""
        core = self.core
        spec = core.cache.gang_spec(key)
        pending = [m for m in core.cache.members(key) if m.pending]
        nominated = hash(frozenset(m.nominated_node for m in pending if m.nominated_node))
        return (core.cache.capacity_version, core.ledger.reservation_version, core.ledger.inflight_version,
                len(pending), spec.min_count if spec else 0, self._claims.value, nominated)

    def nofit_unchanged(self, state: GangState) -> bool:
        """Whether the gang's last no-fit still holds (nothing it depends on moved)."""
        return state.nofit is not None and state.nofit.version == self.fit_version(state.key)

    def memo_answer(self, state: GangState, candidates: list[str]) -> str | None:
        memo = state.nofit
        if memo is not None and memo.version == self.fit_version(state.key) and \
                memo.candidates == fingerprint(candidates):
            return memo.reason
        return None

    def candidates(self, names: Iterable[str], gang: str, within: tuple[int, str] | None,
                   labelled_only: bool, freed: Freed | None = None) -> list[CandidateNode]:
        """Candidate nodes with the capacity the gang may use (other gangs' reservations excluded).

        A gang with a topology constraint considers only nodes carrying every level's label: a
        node missing one belongs to no domain at that level and must not pass for one. ``freed``
        adds capacity that would come free on some nodes (preemption victims gone).
        """
        out: list[CandidateNode] = []
        nodes = self.core.cache.nodes
        candidate = self.core.ledger.candidate
        for name in dict.fromkeys(names):  # a name offered twice is one node: its capacity counts once
            node = nodes.get(name)
            if node is None:
                continue
            if within is not None and node.paths[within[0]] != within[1]:
                continue
            if labelled_only and "" in node.domains:
                continue
            found = candidate(node, gang)
            if found is None:
                continue
            extra = freed.get(name) if freed else None
            if extra is not None:
                found = CandidateNode(name, node.domains, add(found.free, extra[0]),
                                      found.pods_free + extra[1])
            out.append(found)
        return out

    def plan(self, spec: GangSpec, pending: Mapping[str, PodRecord], candidates: list[str],
             bound_nodes: list[str], first_uid: str | None, freed: Freed | None = None) -> Placement | NoFit:
        """Place the pending members (all of them, else just enough for quorum). Pure: no state."""
        required = self.level(spec.required_topology)
        preferred = self.level(spec.preferred_topology)
        constrained = required is not None or preferred is not None or spec.slice_topology is not None or \
            any(p.required_topology for p in spec.parts)
        nodes = self.candidates(candidates, spec.key, self._pinned_domain(required, bound_nodes),
                                labelled_only=constrained, freed=freed)
        if spec.min_resources and not bound_nodes:
            short = _short_of(spec.min_resources, nodes)
            if short:
                return NoFit(short)
        apart = resolve_apart(pending.values(), self.level_labels, bound_nodes, self.core.cache.nodes)
        result: Placement | NoFit = NoFit("no members to place")
        part_needs = part_needs_of(self.core, spec) if spec.min_parts else None
        for group in _attempts(pending, first_uid, spec.min_count - len(bound_nodes), part_needs):
            result = self._place_group(spec, nodes, group, bound_nodes, required, preferred, apart)
            if isinstance(result, Placement):
                break
        return result

    def _place_group(self, spec: GangSpec, nodes: list[CandidateNode], group: list[PodRecord],
                     bound_nodes: list[str], required: int | None, preferred: int | None,
                     apart: Apart | None) -> Placement | NoFit:
        """One attempt: the members in ``group``, by the search the gang's shape calls for."""
        if spec.min_parts:
            return self._place_parts(nodes, group, spec, required, preferred, apart)
        members = [Member(m.uid, m.requests, m.rank) for m in group]
        shared = next((m.shared_claim for m in group if m.shared_claim is not None), None)
        if shared is not None:
            on = set(bound_nodes)  # the claim is allocated there once a member is bound
            carrier = _carrier_of(group)
            members.sort(key=lambda m: m.key != carrier)  # first: the node must hold the claim at all
            return place_on_one_node([n for n in nodes if not on or n.name in on], members, self.level_names,
                                     required, preferred, apart,
                                     f"shares ResourceClaim {shared.key} among its members")
        slices = self.level(spec.slice_topology)
        if slices is not None and spec.slice_size and not bound_nodes:
            return place_sliced(nodes, members, self.level_names, required, preferred, slices,
                                spec.slice_size, apart)
        if slices is not None and spec.slice_size:
            # Replacements for lost members of a running gang go back into their slices' domains.
            return place_replacements_in_slices(nodes, members, self.level_names, slices,
                                                spec.slice_size, self._slice_paths(bound_nodes, slices))
        pins = self._pin_groups(group)
        if pins is not None:
            return self._place_pinned(nodes, members, pins, required, preferred, apart)
        return place_gang(nodes, members, self.level_names, required, preferred, apart)

    def _pin_groups(self, group: list[PodRecord]) -> dict[Pins, set[str]] | None:
        """The members' uids by what their nodeSelectors pin, when they are not all pinned alike
        (None, the common case: kube-scheduler offered the filtered member the nodes of them all)."""
        out: dict[Pins, set[str]] = {}
        for m in group:
            out.setdefault(topology_pins(m, self.level_labels), set()).add(m.uid)
        return out if len(out) > 1 else None

    def _place_pinned(self, nodes: list[CandidateNode], members: list[Member], pins: dict[Pins, set[str]],
                      required: int | None, preferred: int | None, apart: Apart | None) -> Placement | NoFit:
        """Members pinned to different domains (``topology/pinned.py``), each group on its nodes."""
        records, labels = self.core.cache.nodes, self.level_labels
        groups = [PinnedGroup(describe(p), [n for n in nodes if node_matches(records[n.name], p, labels)],
                              [m for m in members if m.key in uids])
                  for p, uids in pins.items()]
        return place_pinned(groups, self.level_names, required, preferred, apart)

    def _place_parts(self, nodes: list[CandidateNode], group: list[PodRecord], spec: GangSpec,
                     required: int | None, preferred: int | None, apart: Apart | None) -> Placement | NoFit:
        """A composite's members part by part, each part in its own domain (``parts.py``)."""
        parts = composite_parts(self.core, spec, group, self.level)
        return place_parts(nodes, parts, self.level_names, required, preferred, apart)

    def _slice_paths(self, bound_nodes: list[str], level: int) -> list[tuple[str, ...]]:
        """The slice-domain path of each running member (unknown nodes count as no domain)."""
        nodes = self.core.cache.nodes
        return [nodes[name].domains[: level + 1] if name in nodes else () for name in bound_nodes]

    def _pinned_domain(self, required: int | None, bound_nodes: list[str]) -> tuple[int, str] | None:
        """The required domain members already running pin (the rest must join them), if any."""
        if required is None or not bound_nodes:
            return None
        first = self.core.cache.nodes.get(bound_nodes[0])
        if first is not None and first.paths[required]:
            return required, first.paths[required]
        return None

    @staticmethod
    def with_mates_nominations(candidates: list[str], pending: Mapping[str, PodRecord],
                               uid: str) -> list[str]:
        """The candidates plus the nodes kube-scheduler nominated the pod's gang mates to (the very
        same list when there are none to add, so callers can tell by identity).

        kube-scheduler counts a pod nominated to a node (after its own preemption made room there)
        as occupying that node when it filters any other pod of equal or lower priority, gang mates
        included. So each nominated member passes its filters only on its own nominated node, and a
        gang planned on what one member is offered would never fit where the room was made. The
        ledger knows those nodes' real free capacity; the mates passed the scheduler's filters there
        when they were nominated.
        """
        nominated = [m.nominated_node for m in pending.values() if m.nominated_node and m.uid != uid]
        if not nominated:
            return candidates  # the common case: no set of (thousands of) candidate names to build
        offered = set(candidates)
        extra = [node for node in nominated if node not in offered]
        return candidates + extra if extra else candidates

    def with_mates_pins(self, candidates: list[str], pending: Mapping[str, PodRecord], uid: str) -> list[str]:
        """The candidates plus the nodes the mates' nodeSelectors pin them to, when those differ from
        the pod's own (the very same list when there are none to add).

        kube-scheduler offers a pod only the nodes its own nodeSelector allows; a mate pinned
        elsewhere (Kueue pins each member to its domain, or to its own node) can only go where its
        pins say. Those nodes have not passed the scheduler's filters for this pod; the mate's own
        filter call checks its node again before it binds.
        """
        labels = self.level_labels
        own = topology_pins(pending[uid], labels) if uid in pending else ()
        others = {p for m in pending.values()
                  if m.uid != uid and (p := topology_pins(m, labels)) and p != own}
        if not others:
            return candidates
        offered = set(candidates)
        extra = {node for p in others for node in pinned_nodes(self.core.cache.nodes, p, labels)
                 if node not in offered}
        return candidates + sorted(extra) if extra else candidates

    def remember_nofit(self, state: GangState, result: NoFit, candidates: list[str]) -> str:
        reason = f"gang {state.key} {result.reason}"
        state.nofit = NoFitMemo(self.fit_version(state.key), fingerprint(candidates), reason)
        self.core.metrics.placements.labels("nofit").inc()
        return reason

    def reserve(self, state: GangState, placement: Placement, pending: Mapping[str, PodRecord],
                needed: int) -> None:
        ledger = self.core.ledger
        for uid, node in placement.assignment.items():
            ledger.reserve(state.key, uid, node, pending[uid].requests)
        note_reserved(state, placement.domain, needed)
        state.nofit = None
        self.core.metrics.placements.labels("fit").inc()
        log.info("gang reserved", extra={"gang": state.key, "members": len(placement.assignment),
                                         "domain": "/".join(placement.domain)})

    def partial_gangs(self, exclude: str) -> list[tuple[GangSpec, list[PodRecord], list[str]]]:
        """Gangs running with fewer than minCount members bound, that no bind is completing.

        Members whose bind succeeded but that the watch has not shown bound yet count as bound:
        a gang that just reached quorum is not partial. Only gangs with a pending member and a
        bound or binding one can be partial; the cache keeps those sets as pods change, so a
        cluster of running gangs costs a set lookup per gang here, not a read of every member.
        """
        cache = self.core.cache
        inflight = self.core.ledger.inflight()
        pending_in, holding_in = cache.membership.pending_in, cache.membership.holding_in
        binding = {pod.gang_key for uid in inflight if (pod := cache.pods.get(uid)) is not None}
        out: list[tuple[GangSpec, list[PodRecord], list[str]]] = []
        for key in [k for k in cache.gang_members if k in pending_in and (k in holding_in or k in binding)]:
            spec = self._repairable_spec(key, exclude)
            if spec is None:
                continue
            partial = self._partly_bound(spec, inflight)
            if partial is not None:
                out.append((spec, *partial))
        return out

    def _bound_nodes(self, members: list[PodRecord], inflight: Mapping[str, str]) -> list[str]:
        """Nodes of the members bound (on nodes that exist, not finished or leaving) or whose bind
        is in flight (inlined, not ``runs``: it is asked of every candidate gang's members)."""
        nodes = self.core.cache.nodes
        bound_nodes = [m.node_name for m in members
                       if m.node_name and not m.terminal and not m.deleting and m.node_name in nodes]
        bound_nodes += [inflight[m.uid] for m in members if m.uid in inflight and not m.node_name]
        return bound_nodes

    def _repairable_spec(self, key: str, exclude: str) -> GangSpec | None:
        """The gang's declaration when it is a valid gang nothing else is completing: not reserved,
        holding no binds, not backing off (None otherwise)."""
        core = self.core
        if key == exclude or core.ledger.reserved_count(key):
            return None
        state = self.registry.gangs.get(key)
        if state is not None and (state.held or state.binds_in_flight or state.backoff_until > core.clock()):
            return None
        spec = core.cache.gang_spec(key)
        if spec is None or not spec.is_gang or spec.min_count < 1 or spec.problem:
            return None
        return spec

    def _partly_bound(self, spec: GangSpec,
                      inflight: Mapping[str, str]) -> tuple[list[PodRecord], list[str]] | None:
        """(pending members, nodes of the bound ones) of a gang bound short of minCount that has
        enough pending members to complete it and no no-fit still holding; None otherwise."""
        core, key = self.core, spec.key
        members = core.cache.members(key)
        bound_nodes = self._bound_nodes(members, inflight)
        if not bound_nodes or len(bound_nodes) >= spec.min_count:
            return None
        pending = [m for m in members if m.pending and m.uid not in inflight]
        if len(pending) < spec.min_count - len(bound_nodes):
            return None
        state = self.registry.gangs.get(key)
        if state is not None and self.nofit_unchanged(state):
            return None
        return pending, bound_nodes
