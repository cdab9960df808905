"""Free DRA devices per node, and the device demand of each pending pod (the one place both are kept).

The cache feeds this inventory with ResourceSlices, ResourceClaims, ResourceClaimTemplates,
DeviceClasses and the claim references of pods. It answers two questions, both as resource maps
the placement code already understands (names under ``devices:``, see ``device_demand.py``):

* ``node_free(node)``: per device kind, how many devices (or whole requests) the node can still give;
* ``demand(uid)``: what a pending pod's claims ask for.

Who owns an allocated device: kube-scheduler allocates a pod's claim in Reserve/PreBind, before it
asks Quorum to bind, and a failed bind leaves the allocation in place. A device allocated to a claim
whose only user is a *pending* pod is therefore counted as free, and that pod keeps its demand: the
pod's reservation in Quorum's ledger is what holds it. Once the pod is bound (or the claim has other
users, or users Quorum does not know), the devices are taken and the pod demands nothing more.
Counting it both ways would over-commit the node for the whole time a gang's binds are held.

Kinds are measured independently on a node; kube-scheduler picks the actual devices. Requests of
different kinds that select overlapping devices on one node can be over-estimated here; the in-tree
DRA filter, which runs before Quorum is asked, then keeps the pod off that node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .device_cel import Field, SelectorCache, device_data, fields_read, project_raw
from .device_demand import (
    Choice,
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
    pod_claim_refs,
    selectors_of,
)
from .resources import Resources

ALL_NODES = "*"  # a change that may move the free devices of every node
_MEMO_LIMIT = 1 << 20  # selector results and device variables kept; rebuilt after a clear


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


@dataclass(slots=True)
class Changes:
    """What an update moved: nodes whose free devices changed, pods whose demand may have."""

    nodes: set[str]
    pods: set[str]


class DeviceInventory:
    def __init__(self) -> None:
        self.selectors = SelectorCache()
        self._slices: dict[str, tuple[str, tuple[Ident, ...]]] = {}  # slice name -> node, devices
        self._node_devices: dict[str, dict[Ident, str]] = defaultdict(dict)  # node -> device -> signature
        self._device_node: dict[Ident, str] = {}
        # signature -> (driver, attributes, capacity) of the devices that have it, and how many do
        self._device_raw: dict[str, list[Any]] = {}
        self._device_data: dict[str, dict[str, Any]] = {}  # signature -> the CEL ``device`` variable
        self._unencodable = 0
        self._claims: dict[str, _Claim] = {}
        self._allocated: dict[Ident, str] = {}  # device -> claim key
        self._templates: dict[str, tuple[Request, ...]] = {}
        self._classes: dict[str, tuple[str, ...]] = {}
        self._pods: dict[str, _PodClaims] = {}
        self._claim_users: dict[str, set[str]] = defaultdict(set)  # claim key -> pods naming it
        self._template_users: dict[str, set[str]] = defaultdict(set)
        self._kinds: dict[str, DeviceKind] = {}
        self._kind_refs: dict[str, int] = {}
        self._match: dict[tuple[str, str], bool] = {}  # (choice.selects, device signature)
        # Selectors read a few fields of a device: devices alike in those share one evaluation.
        self._fields: dict[str, tuple[Field, ...] | None] = {}
        self._projected: dict[tuple[str, object], bool] = {}
        self._checked: dict[str, str] = {}  # kind key -> why it cannot be counted ("" when it can)
        self._free: dict[str, Resources] = {}
        self.last_error = ""  # the newest selector evaluation error, for logs and /debug

    # --- ResourceSlices ------------------------------------------------------------------
    def upsert_slice(self, obj: Mapping[str, Any]) -> Changes:
        name = name_of(obj)
        changed = self._drop_slice(name)
        spec = field_of(obj, "spec")
        node, driver = spec.get("nodeName"), spec.get("driver")
        pool = field_of(spec, "pool").get("name")
        if not (isinstance(node, str) and node and isinstance(driver, str) and isinstance(pool, str)):
            return Changes(changed, set())  # not node-local: not counted (README, "DRA devices")
        idents = []
        for device in items_of(spec, "devices"):
            if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
                continue
            ident = (driver, pool, device["name"])
            replaced = self._node_devices[node].get(ident)
            if replaced is not None:  # the same device published twice: counted once
                self._forget_signature(replaced)
            self._node_devices[node][ident] = self._signature(driver, device)
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
                self._forget_signature(signature)
            if self._device_node.get(ident) == node:
                del self._device_node[ident]
        if not devices:
            self._node_devices.pop(node, None)
        self._free.pop(node, None)
        return {node}

    def _signature(self, driver: str, device: Mapping[str, Any]) -> str:
        """Identical devices share one signature, so a selector is evaluated once for all of them."""
        attributes, capacity = field_of(device, "attributes"), field_of(device, "capacity")
        try:
            signature = orjson.dumps([driver, attributes, capacity], option=orjson.OPT_SORT_KEYS).decode()
        except (orjson.JSONEncodeError, TypeError):  # keys or numbers JSON cannot hold: alike only to itself
            self._unencodable += 1
            signature = f"{driver}\0#{self._unencodable}"
        held = self._device_raw.get(signature)
        if held is None:
            self._device_raw[signature] = [(driver, attributes, capacity), 1]
        else:
            held[1] += 1
        return signature

    def _forget_signature(self, signature: str) -> None:
        held = self._device_raw.get(signature)
        if held is not None:
            held[1] -= 1
            if held[1] <= 0:
                del self._device_raw[signature]
                self._device_data.pop(signature, None)

    def _data(self, signature: str) -> dict[str, Any]:
        """The CEL ``device`` variable, built only for devices a selector is evaluated on."""
        data = self._device_data.get(signature)
        if data is None:
            if len(self._device_data) > _MEMO_LIMIT:
                self._device_data.clear()
            data = self._device_data[signature] = device_data(*self._device_raw[signature][0])
        return data

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
                    self._checked.pop(key, None)
                    moved = True
        if moved:
            self._free.clear()
            return {ALL_NODES}
        return set()

    # --- DeviceClasses -------------------------------------------------------------------
    def upsert_class(self, obj: Mapping[str, Any]) -> Changes:
        selectors = selectors_of(field_of(obj, "spec").get("selectors"))
        name = name_of(obj)
        if self._classes.get(name) == selectors:
            return Changes(set(), set())
        self._classes[name] = selectors
        return self._classes_moved()

    def delete_class(self, obj: Mapping[str, Any]) -> Changes:
        if self._classes.pop(name_of(obj), None) is None:
            return Changes(set(), set())
        return self._classes_moved()

    def _classes_moved(self) -> Changes:
        self._match.clear()
        self._fields.clear()
        self._projected.clear()
        self._checked.clear()
        self._free.clear()
        return Changes({ALL_NODES}, set(self._pods))

    # --- pods ----------------------------------------------------------------------------
    def set_pod(self, uid: str, namespace: str, spec: Mapping[str, Any], status: Mapping[str, Any],
                bound: bool) -> Changes:
        """Note a pod's claim references: the nodes whose free devices this moved, and the other
        pods naming the same claims (whether a claim is shared decides their demand)."""
        refs = pod_claim_refs(spec, status)
        old = self._pods.get(uid)
        if old is not None and old.refs == refs and old.bound == bound:
            return Changes(set(), set())
        changes = self._unindex(uid, old)
        if refs:
            self._pods[uid] = _PodClaims(namespace, refs, bound)
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

    def demand(self, uid: str) -> Resources:
        """What a pending pod's claims ask for (empty for pods without claims and bound pods)."""
        pod = self._pods.get(uid)
        if pod is None or pod.bound:
            return {}
        total: Resources = {}
        for claim_name, template in pod.refs:
            requests = self._requests_of(pod.namespace, claim_name, template)
            add_demand(total, [self._check(r) for r in requests])
        return total

    def _requests_of(self, namespace: str, claim_name: str, template: str) -> tuple[Request, ...]:
        key = f"{namespace}/{claim_name}"
        claim = self._claims.get(key) if claim_name else None
        if claim is not None:
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

    def _check(self, request: Request) -> Request:
        """The request, or why it cannot be counted: a class not seen, a selector that cannot compile."""
        if request.kind is None:
            return request
        why = self._checked.get(request.kind.key)
        if why is None:
            why = ""
            for choice in request.kind.choices:
                classes = self._classes.get(choice.class_name)
                if classes is None:
                    why = f"DeviceClass {choice.class_name[:100]} not found"
                    break
                for expression in (*classes, *choice.selectors):
                    compiled = self.selectors.compile(expression)
                    if isinstance(compiled, str):
                        why = f"a selector of {choice.class_name[:100]} {compiled}"
                        break
                if why:
                    break
            self._checked[request.kind.key] = why
        return Request(None, request.amount, why) if why else request

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
                amount = sum(1 for sig in free if self._matches(kind.choices[0], sig))
            else:
                amount = self._requests_served(kind, devices, free)
            if amount:
                out[kind.key] = amount
        return out

    def _requests_served(self, kind: DeviceKind, devices: Mapping[Ident, str], free: list[str]) -> int:
        """How many requests of a kind the node serves, as kube-scheduler would give them one after
        another: each takes the first choice that still fits. Devices taken for one choice are
        assumed gone for all (exact for choices of one class, cautious for overlapping ones)."""
        left = []
        for choice in kind.choices:
            available = sum(1 for sig in free if self._matches(choice, sig))
            if choice.all_devices:
                matching = sum(1 for sig in devices.values() if self._matches(choice, sig))
                available = available if matching and available == matching else 0
            left.append((choice, available))
        served = 0
        while True:
            taken = next((c.count if not c.all_devices else n for c, n in left if n and n >= c.count), 0)
            if not taken:
                return served
            served += 1
            left = [(c, n - taken) for c, n in left]

    def _is_free(self, ident: Ident) -> bool:
        key = self._allocated.get(ident)
        if key is None:
            return True
        claim = self._claims.get(key)
        if claim is None:
            return True
        users = self._users_of(key, claim)
        if len(users) != 1:
            return False
        pod = self._pods.get(next(iter(users)))
        return pod is not None and not pod.bound  # held by the pending pod's own demand

    def _matches(self, choice: Choice, signature: str) -> bool:
        known = self._match.get((choice.selects, signature))
        if known is None:
            if choice.selects not in self._fields:
                expressions = (*self._classes.get(choice.class_name, ()), *choice.selectors)
                self._fields[choice.selects] = fields_read(expressions)
            fields = self._fields[choice.selects]
            driver, attributes, capacity = self._device_raw[signature][0]
            projected = project_raw(driver, attributes, capacity, fields) if fields is not None else None
            key = (choice.selects, signature if projected is None else projected)
            known = self._projected.get(key)
            if known is None:
                if len(self._projected) > _MEMO_LIMIT or len(self._match) > _MEMO_LIMIT:
                    self._projected.clear()
                    self._match.clear()
                expressions = (*self._classes.get(choice.class_name, ()), *choice.selectors)
                result = self.selectors.all_match(expressions, self._data(signature))
                if isinstance(result, str):
                    self.last_error = f"{choice.class_name}: {result}"
                known = self._projected[key] = result is True  # an expression that fails selects nothing
            self._match[(choice.selects, signature)] = known
        return known

    def _nodes_of(self, idents: tuple[Ident, ...]) -> set[str]:
        nodes = {self._device_node[i] for i in idents if i in self._device_node}
        for node in nodes:
            self._free.pop(node, None)
        return nodes

    def counts(self) -> dict[str, int]:
        return {"resourceslices": len(self._slices), "resourceclaims": len(self._claims),
                "deviceclasses": len(self._classes), "device_kinds": len(self._kinds)}
