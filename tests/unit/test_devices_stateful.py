"""Generated scenarios with GPUs as DRA devices: the device accounting adds up, and gangs stay whole.

The scenarios of ``test_core_stateful`` run again, with every GPU a device of a ResourceSlice and
every pod asking for its GPUs through a claim made from a template. The simulated kube-scheduler
allocates a claim before it calls Quorum's bind (PreBind), keeps the allocation when the bind is
refused (Unreserve), pins a pod with an allocated claim to that node, and frees the allocation when
Quorum answers the pod with no node (PostFilter). The device class now and then selects nothing.

On top of the core's invariants, after every step: each node's free devices, as Quorum counts them,
are its devices minus those allocated to claims of pods that are not pending (devices allocated to
a pending pod stay its own demand), and kube-scheduler never allocates a device twice.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from extender.cluster.dra.feed import DEVICE_SOURCES, DeviceFeed

from .core_world import NAMESPACE, NODE_NAMES, ClusterModel, Obj, bound_node
from .dra_objects import DRIVER, claim, device_class, exactly, resource_slice, template
from .test_core_stateful import CoreMachine

KIND = f"devices:{DRIVER}"
SOURCES = {s.name: s for s in DEVICE_SOURCES}
COUNT = "test.quorum.dev/devices"  # the devices a test pod asks for (its claim's count)


def devices_of(obj: Obj) -> int:
    return int(obj["metadata"].get("annotations", {}).get(COUNT, "0"))


class DeviceClusterModel(ClusterModel):
    """The cluster with GPUs as devices: slices per node, one claim per pod, kube-scheduler's view."""

    def __init__(self, loop: Any) -> None:
        super().__init__(loop)
        self.slices: dict[str, int] = {}  # node -> devices
        self.claims: dict[str, Obj] = {}  # pod uid -> its claim
        self.matching = True  # whether the device class selects the driver's devices
        # Pods whose devices kube-scheduler freed (it gave up their bind call) while Quorum's
        # binding was already at the apiserver: that binding can no longer be called back.
        self.freed_in_flight: set[str] = set()

    # --- objects as the watches deliver them
    def feed(self) -> DeviceFeed:
        return DeviceFeed(self.cache)

    def device_class(self) -> Obj:
        return device_class() if self.matching else device_class(expression='device.driver == "other"')

    def fill_devices(self) -> None:
        """A fresh cache lists the device objects too."""
        feed = self.feed()
        feed.replace(SOURCES["deviceclasses"], [self.device_class()])
        templates = [template(f"t{n}", exactly(n)) for n in (1, 2, 4, 8)]
        feed.replace(SOURCES["resourceclaimtemplates"], templates)
        feed.replace(SOURCES["resourceslices"], [resource_slice(n, d) for n, d in self.slices.items()])
        feed.replace(SOURCES["resourceclaims"], list(self.claims.values()))

    def put_slice(self, node_name: str, devices: int | None) -> None:
        feed = self.feed()
        if devices is None:
            self.slices.pop(node_name, None)
            feed.delete(SOURCES["resourceslices"], resource_slice(node_name, 0))
        else:
            self.slices[node_name] = devices
            feed.upsert(SOURCES["resourceslices"], resource_slice(node_name, devices))

    def put_claim(self, uid: str, node_name: str = "") -> None:
        """The pod's claim, allocated on ``node_name`` (the lowest free devices there) or not."""
        obj = self.pods.get(uid)
        if obj is None:
            return
        name, count = obj["metadata"]["name"], devices_of(obj)
        taken = self.allocated_on(node_name) if node_name else set()
        free = [i for i in range(self.slices.get(node_name, 0)) if i not in taken]
        if node_name and len(free) < count:
            raise AssertionError(f"kube-scheduler allocated {count} devices on {node_name}, {len(free)} free")
        made = claim(f"{name}-gpu", exactly(count), namespace=NAMESPACE, owner_uid=uid,
                     allocated_on=node_name, devices=free[:count] if node_name else range(0))
        made["metadata"]["annotations"] = {"node": node_name}
        if node_name:
            self.freed_in_flight.discard(uid)
        elif uid in self.binding and self.claim_node(uid):
            self.freed_in_flight.add(uid)
        self.claims[uid] = made
        self.feed().upsert(SOURCES["resourceclaims"], made)

    def allocated_on(self, node_name: str) -> set[int]:
        out: set[int] = set()
        for made in self.claims.values():
            if made["metadata"]["annotations"]["node"] == node_name:
                out |= {int(r["device"].split("-")[1]) for r in
                        made["status"]["allocation"]["devices"]["results"]}
        return out

    def claim_node(self, uid: str) -> str:
        made = self.claims.get(uid)
        return made["metadata"]["annotations"]["node"] if made is not None else ""

    # --- pods
    def new_pod(self, gang: str | None, gpus: int, min_count: int, rack: bool,
                groups: tuple[str, ...], priority: int = 0) -> Obj:
        obj = copy.deepcopy(super().new_pod(gang, gpus, min_count, rack, groups, priority))
        obj["metadata"]["annotations"][COUNT] = str(gpus)
        obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
        obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"t{gpus}"}]
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName":
                                                   f"{obj['metadata']['name']}-gpu"}]
        return obj

    def create_pod(self, obj: Obj) -> None:
        super().create_pod(obj)
        if obj["metadata"]["uid"] not in self.claims:
            self.put_claim(obj["metadata"]["uid"])  # kube-controller-manager makes it from the template

    def drop_pod(self, uid: str) -> None:
        super().drop_pod(uid)
        made = self.claims.pop(uid, None)
        if made is not None:  # garbage-collected with its pod
            self.feed().delete(SOURCES["resourceclaims"], made)

    def put_pod(self, obj: Obj) -> None:
        uid, where = obj["metadata"]["uid"], bound_node(obj)
        if where and self.claim_node(uid) != where:
            self.put_claim(uid, where)  # whoever bound it allocated its claim there first
        super().put_pod(obj)

    def bind(self, uid: str, node_name: str) -> None:
        if uid in self.freed_in_flight:
            # The binding lands on a pod whose claim is no longer allocated: the kubelet rejects
            # the pod (it fails, and its gang with it) instead of running it without its devices.
            self.freed_in_flight.discard(uid)
            obj = self.pods[uid]
            obj["spec"]["nodeName"], obj["status"]["phase"] = node_name, "Failed"
            gang = self.gang_of(uid)
            if gang:
                self.disturbed.add(gang)
            self.create_pod(obj)
            return
        if self.claim_node(uid) != node_name:
            self.put_claim(uid, node_name)
        super().bind(uid, node_name)

    def gpus_held(self, name: str) -> int:
        return len(self.allocated_on(name))

    def fitting_nodes(self, obj: Obj, assumed: dict[str, str]) -> list[str]:
        """kube-scheduler's DRA filter: an allocated claim pins the pod; elsewhere, its devices must
        be free of every allocation and of pods assumed there."""
        uid = obj["metadata"]["uid"]
        pinned = self.claim_node(uid)
        if pinned:
            return [pinned] if pinned in self.nodes else []
        used = {n: len(self.allocated_on(n)) for n in self.slices}
        for other, where in assumed.items():
            if other != uid and other in self.pods and not self.claim_node(other) and where in used:
                used[where] += devices_of(self.pods[other])
        need = devices_of(obj) if self.matching else 1
        if not self.matching:
            return []
        return [n for n in sorted(self.nodes) if self.slices.get(n, 0) - used.get(n, 0) >= need]


class DeviceMachine(CoreMachine):
    """CoreMachine with DRA devices instead of extended GPUs."""

    model: DeviceClusterModel

    def __init__(self) -> None:
        self._devices_ready = False
        super().__init__()

    def _start(self) -> Any:
        if not isinstance(getattr(self, "model", None), DeviceClusterModel):
            self.model = DeviceClusterModel(self.loop)
        coordinator = super()._start()
        self.loop.run(self.model.fill_devices)
        return coordinator

    @rule(name=st.sampled_from(NODE_NAMES), gpus=st.none() | st.integers(0, 8))
    def node_changes(self, name: str, gpus: int | None) -> None:
        super().node_changes(name, gpus)
        held = max(self.model.allocated_on(name), default=-1) + 1  # a driver keeps allocated devices
        self.loop.run(lambda: self.model.put_slice(name, None if gpus is None else max(gpus, held)))

    @rule(matching=st.booleans())
    def class_changes(self, matching: bool) -> None:
        self.model.matching = matching
        self.loop.run(lambda: self.model.feed().upsert(SOURCES["deviceclasses"], self.model.device_class()))

    def _bind(self, uid: str, node_name: str) -> Any:
        """PreBind allocates the claim before kube-scheduler asks Quorum to bind."""
        if self.model.claim_node(uid) != node_name and node_name in self.model.fitting_nodes(
                self.model.pods[uid], {u: n for u, n in self.answers.items() if u != uid}):
            self.loop.run(lambda: self.model.put_claim(uid, node_name))
        return super()._bind(uid, node_name)

    def _filter(self, obj: Obj, data: st.DataObject, subset: bool = True) -> None:
        super()._filter(obj, data, subset)
        uid = obj["metadata"]["uid"]
        if uid not in self.answers and self.model.claim_node(uid) and uid in self.model.pods:
            self.loop.run(lambda: self.model.put_claim(uid))  # PostFilter: the allocation is freed

    @invariant()
    def free_devices_add_up(self) -> None:
        cache = self.model.cache
        for name, devices in sorted(self.model.slices.items()):
            record = cache.nodes.get(name)
            if record is None:
                continue
            held = 0
            for uid, made in self.model.claims.items():
                pod = cache.pods.get(uid)
                if made["metadata"]["annotations"]["node"] == name and (pod is None or not pod.pending):
                    held += devices_of(self.model.pods[uid]) if uid in self.model.pods else 0
            expected = devices - held if self.model.matching else 0
            counted = cache.free_on(record)[0].get(KIND, 0)
            assert counted == expected, f"{name}: Quorum counts {counted} free devices, expected {expected}"

    @invariant()
    def bound_pods_hold_allocated_claims(self) -> None:
        for uid, obj in self.model.pods.items():
            if bound_node(obj):
                assert self.model.claim_node(uid) == bound_node(obj), f"{uid} bound without its devices"


DeviceMachine.TestCase.settings = CoreMachine.TestCase.settings
TestDevicesStateful = DeviceMachine.TestCase
