"""In-memory cluster cache fed by the informers; the only source of truth on the request path.

Informer events go in (``upsert_*``/``delete_*``/``replace_*``), derived indexes are kept up to date
incrementally (per-node usage, gang membership, domain occupancy), the coordinator is told the few
changes it must react to (a member, node or gang object gone). Every index is keyed by objects that
exist (entries are dropped when they empty): objects coming and going never grow the cache.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import chain
from typing import Any

from .cache_events import (
    CACHES_SYNCED,
    CAPACITY_FREED,
    DEVICES_MOVED,
    GANG_CHANGED,
    GANG_REMOVED,
    NODE_CHANGED,
    NODE_READINESS,
    NODE_REMOVED,
    POD_REMOVED,
    PODS_LISTED,
    CacheEvent,
    Listener,
    lifecycle_events,
    member_events,
)
from .declarations import Declarations, object_id
from .dra.accounting import DeviceAccounting
from .dra.inventory import ALL_NODES, Changes, DeviceInventory
from .filing import PodFiling, Refiling
from .membership import Membership
from .object_sources import NATIVE_PODGROUPS, OBJECT_PRECEDENCE, GangObjectSource
from .records import GangSpec, NodeRecord, PodRecord, grew, node_record, pod_record, shrank
from .relist import Rejected, meta_field, relist
from .resources import Resources, add_into, beyond_capacity, subtract_into
from .scale_ups import ScaleUpTable

# Told of an object whose quantities were clamped (kind, "namespace/name" or node name, resources):
# it is kept, but can never fit, so whoever wires the cache reports it.
ClampedHook = Callable[[str, str, list[str]], None]


class ClusterCache:
    def __init__(self, level_labels: tuple[str, ...]) -> None:
        self.level_labels = level_labels
        self.nodes: dict[str, NodeRecord] = {}
        self.pods: dict[str, PodRecord] = {}
        self.node_used: dict[str, Resources] = defaultdict(dict)
        self.node_pod_count: dict[str, int] = defaultdict(int)
        # Every gang declaration, from objects and from members (which wins: declarations.py).
        self.declarations = Declarations(OBJECT_PRECEDENCE)
        self.membership = Membership(self.declarations)
        self.gang_members = self.membership.gang_members  # gang key -> member uids (read-only)
        self.filing = PodFiling(self.declarations)  # gangs that depend on a basic PodGroup or a JobSet
        # Pods holding capacity per topology domain prefix (level depth, path) — for scoring pods
        # outside gangs towards domains that are already in use.
        self.domain_pods: dict[str, int] = {}
        self.domain_nodes: dict[str, set[str]] = defaultdict(set)
        # Bumped whenever a domain turns empty or non-empty; scores of pods outside gangs depend
        # only on that, so cached scores stay valid until it moves.
        self.occupancy_epoch = 0
        # Free capacity per node, computed on first use and dropped when the node or its pods change;
        # shared read-only with callers so building placement candidates copies nothing.
        self._free: dict[str, Resources] = {}
        self.listeners: list[Listener] = []
        # Bumped only when free capacity can have changed (nodes, or pods starting/stopping to hold
        # capacity): a gang that did not fit need not be placed again before it moves.
        self.capacity_version = 0
        # Per kind: listed, and its watch not down (kept by the informer through ``set_synced``; it
        # adds the other kinds of gang object it watches when it starts).
        self.synced: dict[str, bool] = {"nodes": False, "pods": False, "podgroups": False}
        self.on_clamped: ClampedHook | None = None
        # DRA devices: free per node and the demand of pending pods (fed by ``dra/feed.py``), and
        # how they enter the pods' requests and the free capacity above.
        self.devices = DeviceInventory()
        self.device_accounting = DeviceAccounting(self.devices, self.pods, self._free)
        self.scale_ups = ScaleUpTable()  # the ProvisioningRequests Quorum made, and their answers
        self.pod_lists_started = 0  # full lists of pods asked for (``listing_pods``)

    # --- helpers -------------------------------------------------------------------------
    def _emit(self, event: CacheEvent) -> None:
        for listener in self.listeners:
            listener(event)

    def set_synced(self, kind: str, synced: bool) -> None:
        """Mark one kind in or out of sync; CACHES_SYNCED goes out when the last one comes in."""
        before = all(self.synced.values())
        self.synced[kind] = synced
        if synced and not before and all(self.synced.values()):
            self._emit(CacheEvent(CACHES_SYNCED, ""))

    def _report_clamped(self, kind: str, key: str, old: Resources | None, new: Resources) -> None:
        """Tell the hook about quantities at the cap, once per object and change, not per event."""
        if self.on_clamped is not None and old != new and (clamped := beyond_capacity(new)):
            self.on_clamped(kind, key, clamped)

    def _domain_paths(self, node_name: str) -> Iterable[str]:
        node = self.nodes.get(node_name)
        if node is None:
            return ()
        return (path for path in node.paths if path)

    def _count_domain(self, path: str, delta: int) -> None:
        before = self.domain_pods.get(path, 0)
        after = before + delta
        if after:
            self.domain_pods[path] = after
        else:
            self.domain_pods.pop(path, None)
        if (before == 0) != (after == 0):
            self.occupancy_epoch += 1

    def _account(self, pod: PodRecord, sign: int) -> None:
        self.membership.count(pod, sign)
        if not pod.holds_capacity:
            return
        node = pod.node_name
        self._free.pop(node, None)
        used = self.node_used[node]
        if sign > 0:
            add_into(used, pod.requests)
        else:
            subtract_into(used, pod.requests)
        if not used:
            del self.node_used[node]  # no entry per name ever seen, only per node in use
        self.node_pod_count[node] += sign
        if not self.node_pod_count[node]:
            del self.node_pod_count[node]
        for path in self._domain_paths(pod.node_name):
            self._count_domain(path, sign)

    def gang_spec(self, key: str) -> GangSpec | None:
        """What the gang asks for, whichever convention declared it (declarations.py decides)."""
        return self.declarations.spec(key)

    @property
    def podgroup_specs(self) -> dict[str, GangSpec]:
        """Gangs declared by native PodGroups (read-only view)."""
        return self.declarations.by_source[NATIVE_PODGROUPS.name]

    @property
    def annotation_specs(self) -> dict[str, GangSpec]:
        """Gangs declared by their members' annotations (read-only view)."""
        return self.declarations.from_members

    def gang_objects_synced(self) -> bool:
        """Every kind of gang object listed (or known not to be served)."""
        return all(synced for kind, synced in self.synced.items() if kind in OBJECT_PRECEDENCE)

    # --- nodes ---------------------------------------------------------------------------
    def upsert_node(self, obj: dict[str, Any]) -> None:
        record = node_record(obj, self.level_labels)
        old = self.nodes.get(record.name)
        if old == record:  # a status heartbeat: nothing read moved, no cached capacity goes stale
            return
        if old is not None and old.domains != record.domains:
            self._reindex_node(old, record)  # stores the record between the two indexings
        else:
            self.nodes[record.name] = record
            if old is None:
                self._index_node_domains(record, +1)
                self._recount_node_domains(record.name, +1)
        self._free.pop(record.name, None)
        self.capacity_version += 1
        self._report_clamped("nodes", record.name, old.allocatable if old else None, record.allocatable)
        if old is None or grew(old, record):
            self._emit(CacheEvent(CAPACITY_FREED, record.name))
        if old is not None and (old.domains != record.domains or shrank(old, record)):
            self._emit(CacheEvent(NODE_CHANGED, record.name))
        if old is not None and old.ready != record.ready:
            self._emit(CacheEvent(NODE_READINESS, record.name))

    def _index_node_domains(self, node: NodeRecord, sign: int) -> None:
        for path in filter(None, node.paths):  # a level without a label has no domain
            if sign > 0:
                self.domain_nodes[path].add(node.name)
            else:
                self.domain_nodes[path].discard(node.name)
                if not self.domain_nodes[path]:
                    del self.domain_nodes[path]

    def _recount_node_domains(self, name: str, sign: int) -> None:
        count = self.node_pod_count.get(name, 0)
        if count:
            for path in self._domain_paths(name):
                self._count_domain(path, sign * count)

    def _reindex_node(self, old: NodeRecord, new: NodeRecord) -> None:
        self._recount_node_domains(old.name, -1)
        self._index_node_domains(old, -1)
        self.nodes[new.name] = new
        self._index_node_domains(new, +1)
        self._recount_node_domains(new.name, +1)
        self.occupancy_epoch += 1

    def delete_node(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            return
        self._recount_node_domains(name, -1)
        self._index_node_domains(node, -1)
        del self.nodes[name]
        self._free.pop(name, None)
        self.capacity_version += 1
        self._emit(CacheEvent(NODE_REMOVED, name))

    def replace_nodes(self, objs: Iterable[dict[str, Any]]) -> list[Rejected]:
        """Load a full list (``relist.py``)."""
        rejected = relist(objs, lambda o: meta_field(o, "name"), self.nodes, self.delete_node,
                          self.upsert_node)
        self.set_synced("nodes", True)
        return rejected

    # --- pods ----------------------------------------------------------------------------
    def upsert_pod(self, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        if not uid:
            return
        gang_key = self.filing.gang_key(uid, obj)
        record = pod_record(obj, gang_key)
        moved = self._devices_changed(self.device_accounting.with_devices(record))
        old = self.pods.get(record.uid)
        left_gang = old is not None and old.gang_key is not None and old.gang_key != gang_key
        left_declaration = self._replace_pod(old, record, left_gang)
        changed_gang = self.membership.join(gang_key, record.uid, obj) if gang_key else ""
        for event in chain(lifecycle_events(old, record, left_gang), member_events(old, record, gang_key)):
            self._emit(event)
        for changed in dict.fromkeys(k for k in (left_declaration, changed_gang) if k):
            self._emit(CacheEvent(GANG_CHANGED, changed, record))  # pod set: annotations moved
        self._emit_devices_moved(moved)

    def _replace_pod(self, old: PodRecord | None, record: PodRecord, left_gang: bool) -> str:
        """Swap a pod's record and its accounting; the capacity version moves only when what the
        pod holds did. Returns the gang it left when that gang's declaration changed with it."""
        if old is not None:
            self._account(old, -1)
        changed = self.membership.leave(old.uid, old.gang_key) if old and left_gang and old.gang_key else ""
        self.pods[record.uid] = record
        self._account(record, +1)
        self._report_clamped("pods", record.key, old.requests if old else None, record.requests)
        if old is None or (old.holds_capacity, old.node_name, old.requests) != (
            record.holds_capacity, record.node_name, record.requests
        ):
            self.capacity_version += 1
        return changed

    def delete_pod(self, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        self._drop_pod(uid)

    def _drop_pod(self, uid: str) -> None:
        self.filing.forget(uid)
        record = self.pods.pop(uid, None)
        if record is None:  # never taken (rejected): what Quorum counted for it goes all the same
            self._emit(CacheEvent(POD_REMOVED, uid))
            return
        self._account(record, -1)
        moved = self._devices_changed(self.devices.drop_pod(uid))
        changed = self.membership.leave(uid, record.gang_key) if record.gang_key else ""
        self.capacity_version += 1
        self._emit(CacheEvent(POD_REMOVED, uid, record))
        if changed:  # the departed member's declaration was the gang's: its mates' declare it now
            self._emit(CacheEvent(GANG_CHANGED, changed, record))
        if record.holds_capacity:
            self._emit(CacheEvent(CAPACITY_FREED, record.node_name))
        self._emit_devices_moved(moved)

    def listing_pods(self) -> None:
        """The informer is about to ask for the full list of pods: a bind counted before then and
        absent from the list is of a pod deleted meanwhile (the ledger lets it go on PODS_LISTED)."""
        self.pod_lists_started += 1

    def replace_pods(self, objs: Iterable[dict[str, Any]]) -> list[Rejected]:
        """Load a full list (``relist.py``); a pod that cannot be taken keeps its last good record."""
        rejected = relist(objs, lambda o: meta_field(o, "uid"), self.pods, self._drop_pod, self.upsert_pod)
        self._emit(CacheEvent(PODS_LISTED, str(self.pod_lists_started)))
        self.set_synced("pods", True)
        return rejected

    # --- gang objects --------------------------------------------------------------------
    def upsert_gang_object(self, source: GangObjectSource, obj: dict[str, Any]) -> None:
        declared, gone = self.declarations.put_object(source, obj)
        # Pods moved first: the gang events below then find them in their new gangs.
        self._refile(self.filing.object_changed(source.name, object_id(obj), obj, [*declared, *gone]))
        for key in gone:
            self._emit_gang(GANG_REMOVED, key)
        for key in declared:
            self._emit_gang(GANG_CHANGED, key)

    def delete_gang_object(self, source: GangObjectSource, obj: dict[str, Any]) -> None:
        gone, changed = self.declarations.drop_object(source.name, object_id(obj))
        self._refile(self.filing.object_changed(source.name, object_id(obj), None, gone))
        for kind, key in chain(((GANG_REMOVED, k) for k in gone), ((GANG_CHANGED, k) for k in changed)):
            self._emit_gang(kind, key)

    def replace_gang_objects(self, source: GangObjectSource,
                             objs: Iterable[dict[str, Any]]) -> list[Rejected]:
        """Load a full list (``relist.py``)."""
        def delete(ident: str) -> None:
            namespace, name = ident.split("/", 1)
            self.delete_gang_object(source, {"metadata": {"namespace": namespace, "name": name}})
        self._refile(self.filing.kind_listed(source.name, served=bool(source.api_version)))
        rejected = relist(objs, lambda o: f"{meta_field(o, 'namespace')}/{meta_field(o, 'name')}",
                          self.declarations.objects_of(source.name), delete,
                          lambda obj: self.upsert_gang_object(source, obj))
        self.set_synced(source.name, True)
        return rejected

    def _refile(self, refiling: Refiling) -> None:
        for pod in refiling.pods:
            self.upsert_pod(pod)
        for uid, key in refiling.moves:
            old = self.pods.get(uid)
            if old is None or old.gang_key == key:
                continue
            record = replace(old, gang_key=key)
            left_gang = old.gang_key is not None
            self._replace_pod(old, record, left_gang)
            moved = self._devices_changed(self.device_accounting.regang(record))
            if key:
                self.membership.enter(key, uid, None, self.filing.topology(uid))
            for event in chain(lifecycle_events(old, record, left_gang), member_events(old, record, key)):
                self._emit(event)
            self._emit_devices_moved(moved)  # a claim its gang mates share may be counted otherwise now

    def _emit_gang(self, kind: str, key: str) -> None:
        """Tell of one declared gang; a podGroup of a v1alpha1 Workload stands for its replicas."""
        self._emit(CacheEvent(kind, key))
        prefix = key + "/"
        if key.count("/") == 2:
            for replica in [k for k in self.gang_members if k.startswith(prefix)]:
                self._emit(CacheEvent(kind, replica))

    # The native PodGroup as the default source (v1beta1), for callers that feed the cache by hand.
    def upsert_podgroup(self, obj: dict[str, Any]) -> None:
        self.upsert_gang_object(NATIVE_PODGROUPS, obj)

    def delete_podgroup(self, obj: dict[str, Any]) -> None:
        self.delete_gang_object(NATIVE_PODGROUPS, obj)

    def replace_podgroups(self, objs: Iterable[dict[str, Any]]) -> list[Rejected]:
        return self.replace_gang_objects(NATIVE_PODGROUPS, objs)

    # --- DRA devices (the accounting itself: dra/accounting.py) ----------------------------
    def apply_device_changes(self, changes: Changes) -> None:
        """What a DRA object's update moved (``dra/feed.py``), told to the coordinator."""
        self._emit_devices_moved(self._devices_changed(changes))

    def _devices_changed(self, changes: Changes) -> set[str]:
        """Apply what devices moved; returns the nodes, told once the caller's own events are out."""
        if self.device_accounting.settle(changes):
            self.capacity_version += 1
        return changes.nodes

    def _emit_devices_moved(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            self._emit(CacheEvent(DEVICES_MOVED, "" if node == ALL_NODES else node))

    # --- queries -------------------------------------------------------------------------
    def free_on(self, node: NodeRecord) -> tuple[Resources, int]:
        """Allocatable minus requests of pods bound there, plus free DRA devices by kind
        (reservations are the coordinator's).

        The returned dict is shared: callers must copy it before changing it.
        """
        free = self._free.get(node.name)
        if free is None:
            free = dict(node.allocatable)
            used = self.node_used.get(node.name)
            if used:
                subtract_into(free, used)
            if self.devices.has_devices(node.name):
                free.update(self.devices.node_free(node.name))
            if self.nodes.get(node.name) is node:  # never keep an entry for a node that is gone
                self._free[node.name] = free
        return free, node.pods_allocatable - self.node_pod_count.get(node.name, 0)

    def members(self, gang_key: str) -> list[PodRecord]:
        return [self.pods[uid] for uid in self.gang_members.get(gang_key, ()) if uid in self.pods]

    def bound_count(self, gang_key: str) -> int:
        """Members holding capacity on a node: what counts towards a gang running."""
        return len(self.membership.members_in("holding", gang_key))

    def counts(self) -> dict[str, int]:
        return {
            "nodes": len(self.nodes),
            "pods": len(self.pods),
            "podgroups": self.declarations.object_count(),  # gangs declared by objects, of any API
            **self.devices.counts(),  # DRA: slices, claims, classes, and the device kinds asked for
        }

