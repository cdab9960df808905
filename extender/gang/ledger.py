"""The one place where free capacity, reservations and in-flight binds are computed.

free(node) = allocatable - requests of pods bound there (the cache) - reservations of other gangs
on it - pods Quorum is binding now that the watch has not shown bound yet.

Every reservation is keyed by pod uid, so a pod can be reserved by at most one gang: a second
``reserve`` for the same uid by another gang is refused, whatever the requests say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..cluster.cache import ClusterCache
from ..cluster.records import NodeRecord, PodRecord
from ..cluster.resources import Resources, add_into, subtract_into
from ..topology.claims import ClaimNode
from ..topology.model import CandidateNode


class DoubleReservation(RuntimeError):
    """A pod already reserved by one gang was about to be reserved by another."""


@dataclass(frozen=True, slots=True)
class Reservation:
    gang: str
    node: str
    requests: Resources


@dataclass(frozen=True, slots=True)
class ProtectedNode:
    """A reserved node as pods outside its gangs see it."""

    free: Resources
    pods_free: int
    reason: str
    holders: tuple[str, ...]


class CapacityLedger:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._by_uid: dict[str, Reservation] = {}
        self._by_gang: dict[str, dict[str, str]] = {}  # gang -> uid -> node
        self._on_node: dict[str, dict[str, Resources]] = {}  # node -> gang -> summed requests
        self._slots: dict[str, dict[str, int]] = {}  # node -> gang -> reserved pod count
        self._inflight: dict[str, str] = {}  # uid -> node
        self._inflight_view: Mapping[str, str] = MappingProxyType(self._inflight)
        self._inflight_gang: dict[str, str] = {}  # uid -> gang, for members bound as a gang
        self._inflight_by_gang: dict[str, set[str]] = {}  # the same, gang -> uids
        # Members whose bind went through before the watch ever showed their pod: who they are.
        self._inflight_unseen: dict[str, PodRecord] = {}
        self._inflight_on_node: dict[str, dict[str, Resources]] = {}  # node -> uid -> requests
        self._inflight_since: dict[str, int] = {}  # uid -> pod lists asked for when it was marked
        self.reservation_version = 0
        self.inflight_version = 0
        self._protected_key: tuple[int, int, int] = (-1, -1, -1)
        self._protected: dict[str, ProtectedNode] = {}
        # Nodes with nothing reserved or in flight, as every gang sees them. A candidate is kept
        # while the cache's free dict for its node is the same object: the cache makes a new one
        # whenever the node or the pods on it change (``ClusterCache._account``, ``upsert_node``).
        self._plain_candidates: dict[str, CandidateNode] = {}

    # ----------------------------------------------------------------- reservations
    def reserve(self, gang: str, uid: str, node: str, requests: Resources) -> None:
        held = self._by_uid.get(uid)
        if held is not None:
            if held.gang != gang:
                raise DoubleReservation(f"pod {uid} is reserved by gang {held.gang}, not {gang}")
            self.unreserve(uid)
        self._by_uid[uid] = Reservation(gang, node, requests)
        self._by_gang.setdefault(gang, {})[uid] = node
        add_into(self._on_node.setdefault(node, {}).setdefault(gang, {}), requests)
        slots = self._slots.setdefault(node, {})
        slots[gang] = slots.get(gang, 0) + 1
        self.reservation_version += 1

    def unreserve(self, uid: str) -> Reservation | None:
        held = self._by_uid.pop(uid, None)
        if held is None:
            return None
        gang, node = held.gang, held.node
        members = self._by_gang[gang]
        del members[uid]
        if not members:
            del self._by_gang[gang]
        slots = self._slots[node]
        per_gang = self._on_node[node]
        if slots[gang] > 1:
            slots[gang] -= 1
            subtract_into(per_gang[gang], held.requests)
        else:
            del slots[gang]
            del per_gang[gang]
        if not slots:
            del self._slots[node]
            del self._on_node[node]
        self.reservation_version += 1
        return held

    def release_gang(self, gang: str) -> list[str]:
        uids = list(self._by_gang.get(gang, ()))
        for uid in uids:
            self.unreserve(uid)
        return uids

    def reservation_of(self, gang: str) -> dict[str, str]:
        """The gang's reserved members (uid -> node); a copy."""
        return dict(self._by_gang.get(gang, {}))

    def reserved_count(self, gang: str) -> int:
        return len(self._by_gang.get(gang, ()))

    def reserved_node(self, uid: str) -> Reservation | None:
        return self._by_uid.get(uid)

    def gangs_on(self, node: str) -> list[str]:
        return sorted(self._on_node.get(node, ()))

    def gangs(self) -> list[str]:
        return sorted(self._by_gang)

    def reserved_nodes(self) -> list[str]:
        return sorted(self._on_node)

    def reserved_pods(self) -> int:
        return len(self._by_uid)

    @property
    def any_reserved(self) -> bool:
        return bool(self._on_node)

    # ----------------------------------------------------------------- in-flight binds
    def mark_inflight(self, uid: str, node: str, requests: Resources, gang: str | None = None,
                      pod: PodRecord | None = None) -> None:
        """A bind succeeded (or is under way) that the cache has not seen: count it as used.

        ``gang``: the member counts towards its gang running even before the watch shows the pod;
        ``pod``: the member, kept while the cache has never seen it (a requeue must evict it too).
        """
        record = self.cache.pods.get(uid)
        if record is not None and record.node_name:
            return  # the cache already counts it
        self.clear_inflight(uid)
        self._inflight[uid] = node
        if gang is not None:
            self._inflight_gang[uid] = gang
            self._inflight_by_gang.setdefault(gang, set()).add(uid)
            if pod is not None and uid not in self.cache.pods:
                self._inflight_unseen[uid] = pod
        self._inflight_on_node.setdefault(node, {})[uid] = requests
        self._inflight_since[uid] = self.cache.pod_lists_started
        self.inflight_version += 1

    def clear_inflight(self, uid: str) -> None:
        node = self._inflight.pop(uid, None)
        if node is None:
            return
        gang = self._inflight_gang.pop(uid, None)
        if gang is not None:
            uids = self._inflight_by_gang[gang]
            uids.discard(uid)
            if not uids:
                del self._inflight_by_gang[gang]
        self._inflight_unseen.pop(uid, None)
        del self._inflight_since[uid]
        per_node = self._inflight_on_node[node]
        del per_node[uid]
        if not per_node:
            del self._inflight_on_node[node]
        self.inflight_version += 1

    def is_inflight(self, uid: str) -> bool:
        return uid in self._inflight

    def inflight_gang(self, uid: str) -> str:
        """The gang a bind in flight counts for ("" for none)."""
        return self._inflight_gang.get(uid, "")

    def unlisted(self, list_number: int) -> dict[str, str]:
        """In-flight binds marked before pod list ``list_number`` was asked for, of pods the cache
        does not hold once that list is loaded: the pod existed when marked, so it was deleted before
        the list, unseen by the watch (created, bound and deleted while it was down), and no watch
        event will ever clear its mark. uid -> the gang it counted for ("" for none)."""
        return {uid: self._inflight_gang.get(uid, "") for uid, since in self._inflight_since.items()
                if since < list_number and uid not in self.cache.pods}

    def claim_nodes(self, gang: str) -> list[ClaimNode]:
        """Every node with the capacity ``gang`` may use, as claims and displacements read it."""
        out = []
        for name, node in self.cache.nodes.items():
            free = self.free(name, gang)
            if free is not None:
                out.append(ClaimNode(name, node.domains, node.allocatable, node.pods_allocatable,
                                     free[0], free[1], node.ready))
        return out

    def inflight_node(self, uid: str) -> str:
        """The node of the pod's bind in flight ("" when none)."""
        return self._inflight.get(uid, "")

    def inflight(self) -> Mapping[str, str]:
        """uid -> node of every bind in flight: a read-only view that follows the marks, not a copy
        (a placement reads it for every gang it repairs; copying it cost a dict per call)."""
        return self._inflight_view

    def inflight_of(self, gang: str, uids: Iterable[str], exclude: Iterable[str] = ()) -> int:
        """In-flight binds of the gang: its members' (``uids``) and any marked with the gang, less
        ``exclude`` (members being evicted)."""
        counted = {uid for uid in uids if uid in self._inflight}
        counted.update(self._inflight_by_gang.get(gang, ()))
        counted.difference_update(exclude)
        return len(counted)

    def unseen_members(self, gang: str) -> list[PodRecord]:
        """Members of the gang Quorum bound whose pods the cache has not seen yet."""
        return [pod for uid, pod in self._inflight_unseen.items()
                if pod.gang_key == gang and uid not in self.cache.pods]

    # ----------------------------------------------------------------- free capacity
    def free(self, node_name: str, exclude_gang: str | None) -> tuple[Resources, int] | None:
        """Free capacity of a node for ``exclude_gang`` (its own reservation does not count).

        The common case (nothing reserved or in flight there) returns the cache's shared dict.
        """
        node = self.cache.nodes.get(node_name)
        if node is None:
            return None
        free, pods_free = self.cache.free_on(node)
        reserved = self._on_node.get(node_name)
        inflight = self._inflight_on_node.get(node_name)
        if not reserved and not inflight:
            return free, pods_free
        free = dict(free)
        if reserved:
            slots = self._slots[node_name]
            for gang, amount in reserved.items():
                if gang != exclude_gang:
                    subtract_into(free, amount)
                    pods_free -= slots[gang]
        if inflight:
            for requests in inflight.values():
                subtract_into(free, requests)
            pods_free -= len(inflight)
        return free, pods_free

    def protected(self) -> dict[str, ProtectedNode]:
        """Reserved nodes with the capacity pods outside the reserving gangs may still use.

        Rebuilt only when capacity, reservations or in-flight binds move.
        """
        key = (self.cache.capacity_version, self.reservation_version, self.inflight_version)
        if key != self._protected_key:
            views: dict[str, ProtectedNode] = {}
            for name, gangs in self._on_node.items():
                holders = tuple(sorted(gangs))
                reason = f"capacity reserved for gang {', '.join(holders)}"
                free = self.free(name, None)
                views[name] = ProtectedNode(free[0], free[1], reason, holders) if free else \
                    ProtectedNode({}, 0, reason, holders)
            self._protected, self._protected_key = views, key
        return self._protected

    def candidate(self, node: NodeRecord, gang: str) -> CandidateNode | None:
        """The node as a placement candidate for ``gang`` (other gangs' reservations excluded).

        A placement reads every candidate node. A node with nothing reserved or in flight looks the
        same to every gang, so its candidate is kept until the cache's free capacity for it changes.
        """
        name = node.name
        if name in self._on_node or name in self._inflight_on_node:
            free = self.free(name, gang)
            return None if free is None else CandidateNode(name, node.domains, free[0], free[1])
        free_now, pods_free = self.cache.free_on(node)
        kept = self._plain_candidates.get(name)
        if kept is not None and kept.free is free_now:  # its pod count changes only with it
            return kept
        made = CandidateNode(name, node.domains, free_now, pods_free)
        if kept is None and len(self._plain_candidates) >= 2 * len(self.cache.nodes) + 64:
            nodes = self.cache.nodes  # nodes that went: their entries go too
            self._plain_candidates = {n: c for n, c in self._plain_candidates.items() if n in nodes}
        self._plain_candidates[name] = made
        return made

    # ----------------------------------------------------------------- invariants
    def check(self) -> list[str]:
        """Violations of the ledger's own invariants (empty when it adds up)."""
        problems: list[str] = []
        by_gang_total = sum(len(m) for m in self._by_gang.values())
        if by_gang_total != len(self._by_uid):
            problems.append(f"ledger: {by_gang_total} reservations by gang, {len(self._by_uid)} by pod")
        sums: dict[str, dict[str, Resources]] = {}
        slots: dict[str, dict[str, int]] = {}
        for uid, held in self._by_uid.items():
            if self._by_gang.get(held.gang, {}).get(uid) != held.node:
                problems.append(f"ledger: pod {uid} is reserved on {held.node} but its gang says otherwise")
            add_into(sums.setdefault(held.node, {}).setdefault(held.gang, {}), held.requests)
            per_node = slots.setdefault(held.node, {})
            per_node[held.gang] = per_node.get(held.gang, 0) + 1
        if slots != self._slots:
            problems.append("ledger: per-node reserved pod counts do not equal the sum over gangs")
        if {n: {g: _nonzero(r) for g, r in gangs.items()} for n, gangs in sums.items()} != {
                n: {g: _nonzero(r) for g, r in gangs.items()} for n, gangs in self._on_node.items()}:
            problems.append("ledger: per-node reserved requests do not equal the sum over gangs")
        return problems + self._check_inflight()

    def _check_inflight(self) -> list[str]:
        problems: list[str] = []
        inflight_nodes = {n: set(u) for n, u in self._inflight_on_node.items()}
        expected: dict[str, set[str]] = {}
        for uid, node in self._inflight.items():
            expected.setdefault(node, set()).add(uid)
        if inflight_nodes != expected:
            problems.append("ledger: in-flight binds per node do not match the in-flight pods")
        if self._inflight_since.keys() != self._inflight.keys():
            problems.append("ledger: in-flight binds and their list numbers name different pods")
        by_gang: dict[str, set[str]] = {}
        for uid, gang in self._inflight_gang.items():
            by_gang.setdefault(gang, set()).add(uid)
        if by_gang != self._inflight_by_gang or not self._inflight_gang.keys() <= self._inflight.keys():
            problems.append("ledger: in-flight binds by gang do not match the in-flight pods")
        return problems

    def overcommitted(self) -> list[str]:
        """Reserved nodes where bound pods, in-flight binds and reservations exceed allocatable.

        Only nodes with reservations: capacity Quorum promised must exist. Pods already bound or
        being bound can exceed a node that shrank afterwards; that is the kubelet's to resolve.
        """
        return [f"node {name} over-committed ({', '.join(short) or 'pods'})"
                for name in sorted(self._on_node) if (short := self.short_on(name)) is not None]

    def short_on(self, node: str) -> list[str] | None:
        """The resources a node with reservations is over-committed in (empty: pod slots only);
        None when it is not over-committed (or holds no reservation, or is gone)."""
        if node not in self._on_node:
            return None
        free = self.free(node, None)
        if free is None:
            return None
        resources, pods_free = free
        short = sorted(r for r, amount in resources.items() if amount < 0)
        return short if short or pods_free < 0 else None

    def overcommitted_nodes(self) -> list[str]:
        """The reserved nodes that ``overcommitted`` names."""
        return [name for name in sorted(self._on_node) if self.short_on(name) is not None]


def _nonzero(resources: Resources) -> Resources:
    return {k: v for k, v in resources.items() if v}
