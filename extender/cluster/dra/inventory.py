"""Free DRA devices per node, and the device demand of each pending pod (the one place both are kept).

The cache feeds it ResourceSlices, ResourceClaims, their templates, DeviceClasses and pods' claim
references. It answers, as resource maps under ``devices:`` (``demand.py``): ``node_free(node)``,
per device kind how many devices (or whole requests) the node can still give, and ``demand(uid)``,
what a pending pod's claims ask for (or would, for a pod the watch has not delivered yet).

Who owns an allocated device: kube-scheduler allocates a pod's claim in Reserve/PreBind, before it
asks Quorum to bind, and a failed bind leaves the allocation in place. A device allocated to a claim
whose only user is a *pending* pod is therefore counted as free, and that pod keeps its demand: the
pod's reservation in Quorum's ledger holds it. Once the pod is bound (or the claim has other or
unknown users), the devices are taken and the pod demands nothing more; counting both ways would
over-commit the node while a gang's binds are held.

Kinds are measured apart on a node, and kube-scheduler picks the devices: requests of kinds that
overlap on a node can be over-estimated, and the in-tree DRA filter (run first) keeps the pod off.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..records import SharedClaim
from ..resources import Resources
from .demand import (
    DeviceKind,
    Ident,
    Request,
    add_demand,
    allocated_devices,
    claim_users,
    field_of,
    items_of,
    key_of,
    name_of,
    parse_requests,
    selectors_of,
)
from .match import DeviceCatalog

ALL_NODES = "*"  # a change that may move the free devices of every node


@dataclass(slots=True)
class _Claim:
    requests: tuple[Request, ...]
    allocated: tuple[Ident, ...]
    users: frozenset[str]  # the owner pod and the pods in reservedFor, by uid


@dataclass(slots=True)
class _PodClaims:
    namespace: str
    refs: tuple[tuple[str, str], ...]  # (claim name or "", template name or "") per pod claim
    bound: bool
    gang: str = ""  # the pod's gang key ("" for none): members of one gang may share a claim


@dataclass(slots=True)
class Changes:
    """What an update moved: nodes whose free devices changed, pods whose demand may have."""

    nodes: set[str]
    pods: set[str]


class DeviceInventory:
    def __init__(self) -> None:
        self.catalog = DeviceCatalog()  # what each device is, and which selectors pick it
        self._slices: dict[str, tuple[str, tuple[Ident, ...]]] = {}  # slice name -> node, devices
        self._node_devices: dict[str, dict[Ident, str]] = defaultdict(dict)  # node -> device -> signature
        self._device_node: dict[Ident, str] = {}
        self._claims: dict[str, _Claim] = {}
        self._allocated: dict[Ident, str] = {}  # device -> claim key
        self._templates: dict[str, tuple[Request, ...]] = {}
        self._pods: dict[str, _PodClaims] = {}
        self._claim_users: dict[str, set[str]] = defaultdict(set)  # claim key -> pods naming it
        self._template_users: dict[str, set[str]] = defaultdict(set)
        self._kinds: dict[str, DeviceKind] = {}
        self._kind_refs: dict[str, int] = {}
        self._free: dict[str, Resources] = {}

    # --- ResourceSlices ------------------------------------------------------------------
    def upsert_slice(self, obj: Mapping[str, Any]) -> Changes:
        name = name_of(obj)
        changed = self._drop_slice(name)
        spec = field_of(obj, "spec")
        node, driver = spec.get("nodeName"), spec.get("driver")
        pool = field_of(spec, "pool").get("name")
        if not (isinstance(node, str) and node and isinstance(driver, str) and isinstance(pool, str)):
            return Changes(changed, set())  # not node-local: not counted (docs/devices.md)
        idents = []
        for device in items_of(spec, "devices"):
            if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
                continue
            ident = (driver, pool, device["name"])
            replaced = self._node_devices[node].get(ident)
            if replaced is not None:  # the same device published twice: counted once
                self.catalog.forget(replaced)
            self._node_devices[node][ident] = self.catalog.signature(driver, device)
            self._device_node[ident] = node
            idents.append(ident)
        self._slices[name] = (node, tuple(idents))
        self._free.pop(node, None)
        return Changes(changed | {node}, set())

    def delete_slice(self, obj: Mapping[str, Any]) -> Changes:
        return Changes(self._drop_slice(name_of(obj)), set())

    def _drop_slice(self, name: str) -> set[str]:
        old = self._slices.pop(name, None)
        if old is None:
            return set()
        node, idents = old
        devices = self._node_devices.get(node, {})
        for ident in idents:
            signature = devices.pop(ident, None)
            if signature is not None:
                self.catalog.forget(signature)
            if self._device_node.get(ident) == node:
                del self._device_node[ident]
        if not devices:
            self._node_devices.pop(node, None)
        self._free.pop(node, None)
        return {node}

    # --- ResourceClaims and templates ----------------------------------------------------
    def upsert_claim(self, obj: Mapping[str, Any]) -> Changes:
        key = key_of(obj)
        old = self._claims.get(key)
        requests = parse_requests(obj.get("spec"))
        claim = _Claim(requests, allocated_devices(obj), claim_users(obj))
        nodes = self._release(key, old)
        self._claims[key] = claim
        for ident in claim.allocated:
            self._allocated[ident] = key
        nodes |= self._nodes_of(claim.allocated)
        nodes |= self._reference(old.requests if old else (), requests)
        return Changes(nodes, self._claim_users.get(key, set()) | claim.users)

    def delete_claim(self, obj: Mapping[str, Any]) -> Changes:
        key = key_of(obj)
        old = self._claims.pop(key, None)
        if old is None:
            return Changes(set(), set())
        nodes = self._release(key, old) | self._reference(old.requests, ())
        return Changes(nodes, self._claim_users.get(key, set()) | old.users)

    def _release(self, key: str, old: _Claim | None) -> set[str]:
        if old is None:
            return set()
        for ident in old.allocated:
            if self._allocated.get(ident) == key:
                del self._allocated[ident]
        return self._nodes_of(old.allocated)

    def upsert_template(self, obj: Mapping[str, Any]) -> Changes:
        key = key_of(obj)
        old = self._templates.get(key, ())
        requests = parse_requests(field_of(field_of(obj, "spec"), "spec"))
        self._templates[key] = requests
        return Changes(self._reference(old, requests), set(self._template_users.get(key, ())))

    def delete_template(self, obj: Mapping[str, Any]) -> Changes:
        key = key_of(obj)
        old = self._templates.pop(key, ())
        return Changes(self._reference(old, ()), set(self._template_users.get(key, ())))

    def _reference(self, old: tuple[Request, ...], new: tuple[Request, ...]) -> set[str]:
        """Count kinds by the objects that ask for them; a new or gone kind moves every node."""
        moved = False
        for request in new:
            if request.kind is not None:
                key = request.kind.key
                self._kind_refs[key] = self._kind_refs.get(key, 0) + 1
                if key not in self._kinds:
                    self._kinds[key] = request.kind
                    moved = True
        for request in old:
            if request.kind is not None:
                key = request.kind.key
                self._kind_refs[key] -= 1
                if not self._kind_refs[key]:
                    del self._kind_refs[key], self._kinds[key]
                    self.catalog.forget_kind(key)
                    moved = True
        if moved:
            self._free.clear()
            return {ALL_NODES}
        return set()

    # --- DeviceClasses -------------------------------------------------------------------
    def upsert_class(self, obj: Mapping[str, Any]) -> Changes:
        selectors = selectors_of(field_of(obj, "spec").get("selectors"))
        return self._classes_moved(self.catalog.set_class(name_of(obj), selectors))

    def delete_class(self, obj: Mapping[str, Any]) -> Changes:
        return self._classes_moved(self.catalog.drop_class(name_of(obj)))

    def _classes_moved(self, moved: bool) -> Changes:
        """A class changed: every node's free devices, and every pod's demand, may have."""
        if not moved:
            return Changes(set(), set())
        self._free.clear()
        return Changes({ALL_NODES}, set(self._pods))

    # --- pods ----------------------------------------------------------------------------
    def set_pod(self, uid: str, namespace: str, refs: tuple[tuple[str, str], ...], bound: bool,
                gang: str = "") -> Changes:
        """Note a pod's claim references (``pod_claim_refs``, kept on its record): the nodes whose
        free devices this moved, and the other pods naming the same claims (whether a claim is
        shared, and by whom, decides their demand)."""
        old = self._pods.get(uid)
        if old is not None and old.refs == refs and old.bound == bound and old.gang == gang:
            return Changes(set(), set())
        changes = self._unindex(uid, old)
        if refs:
            self._pods[uid] = _PodClaims(namespace, refs, bound, gang)
            for claim, template in refs:
                if claim:
                    users = self._claim_users[f"{namespace}/{claim}"]
                    changes.pods |= users
                    users.add(uid)
                if template:
                    self._template_users[f"{namespace}/{template}"].add(uid)
            changes.nodes |= self._claim_nodes(namespace, refs)
        changes.pods.discard(uid)
        return changes

    def set_gang(self, uid: str, gang: str) -> Changes:
        """A pod filed in another gang: the claims it names may now be shared by one gang, or not."""
        pod = self._pods.get(uid)
        if pod is None or pod.gang == gang:
            return Changes(set(), set())
        pod.gang = gang
        mates: set[str] = set()
        for claim_name, _ in pod.refs:
            if claim_name:
                mates |= self._claim_users.get(f"{pod.namespace}/{claim_name}", set())
        return Changes(self._claim_nodes(pod.namespace, pod.refs), mates)

    def has_pod(self, uid: str) -> bool:
        return uid in self._pods

    def drop_pod(self, uid: str) -> Changes:
        return self._unindex(uid, self._pods.get(uid))

    def _unindex(self, uid: str, old: _PodClaims | None) -> Changes:
        if old is None:
            return Changes(set(), set())
        del self._pods[uid]
        others: set[str] = set()
        for claim, template in old.refs:
            for index, name in ((self._claim_users, claim), (self._template_users, template)):
                key = f"{old.namespace}/{name}"
                if name and key in index:
                    index[key].discard(uid)
                    if index is self._claim_users:
                        others |= index[key]
                    if not index[key]:
                        del index[key]
        return Changes(self._claim_nodes(old.namespace, old.refs), others)

    def _claim_nodes(self, namespace: str, refs: tuple[tuple[str, str], ...]) -> set[str]:
        nodes: set[str] = set()
        for claim_name, _ in refs:
            claim = self._claims.get(f"{namespace}/{claim_name}") if claim_name else None
            if claim is not None:
                nodes |= self._nodes_of(claim.allocated)
        for node in nodes:
            self._free.pop(node, None)
        return nodes

    def shared_claim(self, uid: str) -> SharedClaim | None:
        """The first claim this pod shares with its gang mates only, if any (``SharedClaim``)."""
        pod = self._pods.get(uid)
        if pod is None:
            return None
        for claim_name, _ in pod.refs:
            key = f"{pod.namespace}/{claim_name}"
            claim = self._claims.get(key) if claim_name else None
            if claim is not None:
                users = self._gang_users(key, claim)
                if users is not None:
                    return SharedClaim(key, uid == _carrier(users))
        return None

    def _gang_users(self, key: str, claim: _Claim) -> set[str] | None:
        """The users of a claim shared by several members of one gang and nothing else, else None.

        Its owner or reservation names no pod (a PodGroup holds it) or only those members."""
        users = self._users_of(key, claim)
        if len(users) < 2:
            return None
        gangs = {pod.gang if pod is not None else "" for pod in map(self._pods.get, users)}
        return users if len(gangs) == 1 and "" not in gangs else None

    def _none_bound(self, mates: set[str]) -> bool:
        """Whether every member sharing a claim is still pending (``_gang_users`` knows them all)."""
        return all(not self._pods[m].bound for m in mates)

    def demand(self, uid: str, unseen: tuple[str, tuple[tuple[str, str], ...]] | None = None) -> Resources:
        """What a pending pod's claims ask for (empty for pods without claims and bound pods);
        ``unseen``: the namespace and claim references of a pending pod the watch has not delivered."""
        if unseen is not None:
            namespace, refs = unseen
        elif (pod := self._pods.get(uid)) is not None and not pod.bound:
            namespace, refs = pod.namespace, pod.refs
        else:
            return {}
        total: Resources = {}
        for claim_name, template in refs:
            requests = self._requests_of(namespace, claim_name, template, uid)
            add_demand(total, [self.catalog.check(r) for r in requests])
        return total

    def _requests_of(self, namespace: str, claim_name: str, template: str, uid: str) -> tuple[Request, ...]:
        key = f"{namespace}/{claim_name}"
        claim = self._claims.get(key) if claim_name else None
        if claim is not None:
            mates = self._gang_users(key, claim)
            if mates is not None:  # counted once for the gang: by its carrier, until one of them binds
                return claim.requests if uid == _carrier(mates) and self._none_bound(mates) else ()
            users = self._users_of(key, claim)
            if len(users) > 1 and not template:
                if claim.allocated:
                    return ()  # devices already taken; kube-scheduler sends its pods to them
                return (Request(None, 1, f"ResourceClaim {key[:120]} is shared by {len(users)} pods and "
                                         "not allocated yet; give each member its own claim "
                                         "(a ResourceClaimTemplate)"),)
            return claim.requests
        if template:
            requests = self._templates.get(f"{namespace}/{template}")
            if requests is None:
                return (Request(None, 1, f"ResourceClaimTemplate {namespace}/{template[:100]} not found"),)
            return requests
        return (Request(None, 1, f"ResourceClaim {key[:120]} not found"),)

    def _users_of(self, key: str, claim: _Claim) -> set[str]:
        return self._claim_users.get(key, set()) | claim.users

    # --- free devices --------------------------------------------------------------------
    def node_free(self, node: str) -> Resources:
        """Per device kind asked for anywhere: how much this node can still give (shared dict)."""
        free = self._free.get(node)
        if free is None:
            free = self._count_free(node)
            if node in self._node_devices:
                self._free[node] = free
        return free

    def has_devices(self, node: str) -> bool:
        return node in self._node_devices

    def _count_free(self, node: str) -> Resources:
        devices = self._node_devices.get(node)
        if not devices or not self._kinds:
            return {}
        free = [sig for ident, sig in devices.items() if self._is_free(ident)]
        out: Resources = {}
        for kind in self._kinds.values():
            if kind.per_device:
                amount = sum(1 for sig in free if self.catalog.matches(kind.choices[0], sig))
            else:
                amount = self.catalog.requests_served(kind, devices.values(), free)
            if amount:
                out[kind.key] = amount
        return out

    def _is_free(self, ident: Ident) -> bool:
        key = self._allocated.get(ident, "")
        claim = self._claims.get(key)
        if claim is None:  # not allocated, or to a claim not seen
            return True
        mates = self._gang_users(key, claim)
        if mates is not None:  # held by the carrier's demand while no mate is bound
            return self._none_bound(mates)
        users = self._users_of(key, claim)
        if len(users) != 1:
            return False
        pod = self._pods.get(next(iter(users)))
        return pod is not None and not pod.bound  # held by the pending pod's own demand

    def _nodes_of(self, idents: tuple[Ident, ...]) -> set[str]:
        nodes = {self._device_node[i] for i in idents if i in self._device_node}
        for node in nodes:
            self._free.pop(node, None)
        return nodes

    def counts(self) -> dict[str, int]:
        return {"resourceslices": len(self._slices), "resourceclaims": len(self._claims),
                "deviceclasses": len(self.catalog.classes), "device_kinds": len(self._kinds)}


_carrier = min  # the member carrying a shared claim's devices for its gang: the same whoever asks
