"""A small simulated cluster for driving the gang core through generated scenarios.

``Apiserver`` holds the objects as the cluster has them and feeds a ``ClusterCache`` the way the
informers would, with watch events that may lag. ``FakeActions`` binds pods into it and records,
for every binding, whether the pod's gang had reached its quorum in that batch: a member bound
below quorum is exactly the failure gang scheduling exists to prevent.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

from extender.cluster.cache import ClusterCache
from extender.cluster.gang_sources import gang_key_of_pod
from extender.cluster.records import PodRecord
from extender.gang.core import BindFailed

BLOCK, RACK, HOST = "topology.quorum.dev/block", "topology.quorum.dev/rack", "kubernetes.io/hostname"
NAMESPACE = "ml"
NODE_NAMES = tuple(f"b{b}-r{r}-n{n}" for b in range(2) for r in range(2) for n in range(2))
Obj = dict[str, Any]


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Polls without blocking; where the loop would sleep, its clock jumps ahead instead."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events: list[Any] = super().select(0)
        if not events and timeout is None:
            raise RuntimeError("the event loop would wait forever")
        if not events and timeout:
            self._loop.now += timeout
        return events


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """Timeouts and backoffs of thousands of generated steps cost no wall-clock time."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def node(name: str, gpus: int) -> Obj:
    block, rack = name.split("-")[0], "-".join(name.split("-")[:2])
    return {"metadata": {"name": name, "labels": {BLOCK: block, RACK: rack, HOST: name}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                       "nvidia.com/gpu": str(gpus)}}}


def pod(name: str, gpus: int, annotations: dict[str, str] | None = None, group: str | None = None) -> Obj:
    spec: Obj = {"schedulerName": "quorum", "containers": [
        {"name": "main", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
                         "annotations": dict(annotations or {})},
            "spec": spec, "status": {"phase": "Pending"}}


def podgroup(name: str, min_count: int | None, rack: bool) -> Obj:
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}}
    if rack:
        spec["schedulingConstraints"] = {"topology": [{"key": "rack"}]}
    return {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def bound_node(obj: Obj) -> str:
    """The node a pod holds capacity on ("" when pending or finished)."""
    if obj["status"]["phase"] in ("Succeeded", "Failed"):
        return ""
    return str(obj["spec"].get("nodeName") or "")


class Apiserver:
    """The cluster's objects, and the one cache that watches them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self.podgroups: dict[str, Obj] = {}
        self.cache = ClusterCache((BLOCK, RACK, HOST))
        self.watch = "now"  # when a binding reaches the cache: "now", "later" (a timer) or "manual"
        self.api_delay = 0.0
        self.unseen: set[str] = set()  # bound here, not yet delivered to the cache
        self.refuse: set[str] = set()  # uids whose next binding the apiserver refuses
        self.binding: dict[str, str | None] = {}  # uid -> gang, for binding calls under way
        self.bound_alone: list[str] = []  # bindings of a gang member below quorum (must stay empty)
        # Gangs a test step itself left partly bound (refused or cut-short bindings, members
        # finished, deleted or bound by someone else, minCount raised over running members).
        self.disturbed: set[str] = set()

    def gang_of(self, uid: str) -> str | None:
        obj = self.pods.get(uid)
        return None if obj is None else gang_key_of_pod(obj)

    def min_count(self, gang: str) -> int:
        """The quorum the cluster's objects ask for (0 when the gang is not a valid gang now)."""
        name = gang.split("/", 1)[1]
        if name in self.podgroups:
            policy = self.podgroups[name]["spec"]["schedulingPolicy"]
            return int(policy["gang"]["minCount"]) if "gang" in policy else 0
        counts = [int(o["metadata"]["annotations"].get("quorum.dev/min-count", 0))
                  for o in self.pods.values() if gang_key_of_pod(o) == gang]
        return counts[0] if counts and "/g" not in gang else 0

    def running(self, gang: str) -> set[str]:
        return {u for u, o in self.pods.items() if gang_key_of_pod(o) == gang and bound_node(o)}

    def gangs(self) -> set[str]:
        return {k for k in map(gang_key_of_pod, self.pods.values()) if k} | \
            {f"{NAMESPACE}/{g}" for g in self.podgroups}

    def put_pod(self, obj: Obj) -> None:
        self.pods[obj["metadata"]["uid"]] = obj
        self.unseen.discard(obj["metadata"]["uid"])
        self.cache.upsert_pod(obj)

    def drop_pod(self, uid: str) -> None:
        obj = self.pods.pop(uid)
        self.unseen.discard(uid)
        self.cache.delete_pod(obj)

    def deliver(self, uid: str) -> None:
        """The watch event of a binding reaches the cache."""
        if uid in self.unseen:
            self.put_pod(self.pods[uid])

    def bind(self, uid: str, node_name: str) -> None:
        obj = self.pods[uid]
        obj["spec"]["nodeName"] = node_name
        obj["status"]["phase"] = "Running"
        self.unseen.add(uid)
        if self.watch == "now":
            self.deliver(uid)
        elif self.watch == "later":
            self.loop.call_later(0.005, self.deliver, uid)

    def refusal(self, uid: str) -> str:
        """Why the apiserver refuses this binding now ("" when it accepts)."""
        if uid in self.refuse:
            self.refuse.discard(uid)
            return "refused by admission"
        if uid not in self.pods:
            return "pod not found"
        return "pod is already bound" if self.pods[uid]["spec"].get("nodeName") else ""


class FakeActions:
    """The apiserver calls of one Quorum process."""

    def __init__(self, api: Apiserver) -> None:
        self.api = api
        self.alive = True  # False once the process is gone (a restart)
        self.requeued: list[str] = []

    async def bind_pod(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        api = self.api
        gang = api.gang_of(uid)
        need = api.min_count(gang) if gang else 0
        api.binding[uid] = gang
        try:
            await asyncio.sleep(api.api_delay)
            refusal = api.refusal(uid) if self.alive else "Quorum restarted"
            if refusal:
                raise BindFailed(f"binding {namespace}/{name}: {refusal}")
            if gang and need:
                # Every batch member entered this call before any returns (one sleep at least).
                together = api.running(gang) | {u for u, g in api.binding.items() if g == gang}
                if len(together) < need:
                    api.bound_alone.append(f"{name} to {node_name}: {len(together)}/{need} of {gang}")
            api.bind(uid, node_name)
        except BaseException:
            if gang:
                api.disturbed.add(gang)
            raise
        finally:
            del api.binding[uid]

    async def requeue_pods(self, pods: list[PodRecord], reason: str) -> None:
        self.requeued.extend(p.name for p in pods)
