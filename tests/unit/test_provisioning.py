"""Topology-aware scale-up: a required-rack gang that fits in no rack asks cluster-autoscaler for
its capacity in the rack where the fewest members are missing, then the next when refused, and
its request goes when the gang binds or is deleted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from extender.cluster.scale_ups import status_of
from extender.config import Autoscaling, Config
from extender.gang.coordinator import Coordinator
from extender.gang.provisioning import REFUSAL_MEMORY_SECONDS

from .fixtures import World, bound, gang_pod, make_podgroup

RACK = "topology.quorum.dev/rack"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"


def scaling_world(enabled: bool = True, racks: int = 2, clock: Callable[[], float] = time.monotonic) -> World:
    """2 blocks × 2 racks × 2 nodes of 8 GPUs; gangs of 4 whole nodes that require a rack fit nowhere."""
    world = World(racks=racks, nodes_per_rack=2)
    world.cache.listeners.clear()
    config = replace(Config(), autoscaling=Autoscaling(provisioning_requests=enabled))
    world.coordinator = Coordinator(config, world.cache, world.actions, world.metrics, clock=clock,
                                    strict=True)
    return world


def consuming(obj: dict[str, Any], request: str, unschedulable: bool = True) -> dict[str, Any]:
    """A member that consumes a ProvisioningRequest, as kube-scheduler left it when no node passed
    its own filters (Quorum was not asked)."""
    obj["metadata"].setdefault("annotations", {})[CONSUME] = request
    if unschedulable:
        obj["status"] = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    return obj


def consumer_gang(world: World, name: str = "train", size: int = 4, rack: bool = True,
                  made: int | None = None) -> list[str]:
    """A gang whose pods consume "<name>-capacity"; ``made`` of its ``size`` members exist."""
    world.cache.upsert_podgroup(make_podgroup(name, size, topology_key=RACK if rack else None))
    names = [f"{name}{i}" for i in range(size if made is None else made)]
    for pod_name in names:
        world.add(consuming(gang_pod(pod_name, podgroup=name, gpus=8), f"{name}-capacity"))
    return names


def rack_gang(world: World, name: str = "train", size: int = 4) -> list[str]:
    world.cache.upsert_podgroup(make_podgroup(name, size, topology_key=RACK))
    names = [f"{name}{i}" for i in range(size)]
    for pod_name in names:
        world.add(gang_pod(pod_name, podgroup=name, gpus=8))
    return names


async def settled() -> None:
    """Let the request writes run (one gang's writes wait for each other)."""
    for _ in range(6):
        await asyncio.sleep(0)


def answered(world: World, status: str, message: str = "") -> None:
    """The autoscaler's answer to every request Quorum made, as the informer delivers it."""
    for key in list(world.actions.scale_ups):
        namespace, name = key.split("/")
        condition = {"type": status, "status": "True", "reason": status, "message": message}
        world.cache.scale_ups.delete({"metadata": {"namespace": namespace, "name": name}})  # made anew
        world.cache.scale_ups.upsert({"metadata": {"namespace": namespace, "name": name,
                                                   "labels": {"app.kubernetes.io/managed-by": "quorum"}},
                                      "status": {"conditions": [condition]}})


async def test_a_gang_that_fits_in_no_rack_asks_for_the_rack_missing_the_least() -> None:
    world = scaling_world()
    world.add(bound(gang_pod("busy", gpus=8), "b0-r0-n0"))  # rack b0-r0 misses 3, the others 2
    names = rack_gang(world)
    decision = world.filter(names[0])
    await settled()
    assert decision.passing == []
    (asked,) = world.actions.scale_ups.values()
    assert asked["selector"] == {RACK: "b0-r1"} and asked["count"] == 2  # its 2 free nodes hold 2
    assert asked["requests"]["nvidia.com/gpu"] == 8
    assert "asked the autoscaler for room for 2 more × " in decision.reason
    assert "rack b0-r1" in decision.reason
    assert "ScaleUpRequested" in world.actions.event_reasons("train")


async def test_a_refused_rack_is_not_asked_again_and_the_reason_says_why_at_the_end() -> None:
    world = scaling_world()
    names = rack_gang(world)
    asked: list[str] = []
    for _ in range(4):
        world.filter(names[0])
        await settled()
        asked += [v["selector"][RACK] for v in world.actions.scale_ups.values()]
        answered(world, "Failed", "CapacityIsNotFound: max node group size reached")
    assert asked == ["b0-r0", "b0-r1", "b1-r0", "b1-r1"]
    reason = world.filter(names[0]).reason
    assert "the autoscaler cannot add it in any rack" in reason and "max node group size reached" in reason
    await settled()
    assert world.actions.scale_ups == {}
    assert len(world.actions.deleted_scale_ups) == 4


async def test_the_request_goes_when_the_gang_binds_or_is_deleted() -> None:
    world = scaling_world()
    names = rack_gang(world)
    world.filter(names[0])
    await settled()
    (key,) = world.actions.scale_ups
    answered(world, "Provisioned")
    assert "(Provisioned)" in world.filter(names[0]).reason
    world.cache.delete_podgroup(make_podgroup("train", 4))
    await settled()
    assert world.actions.deleted_scale_ups == [key]


async def test_off_by_default_and_only_for_a_required_domain() -> None:
    world = scaling_world(enabled=False)
    world.filter(rack_gang(world)[0])
    other = scaling_world()
    names = [f"free{i}" for i in range(20)]
    for name in names:
        other.add(gang_pod(name, gang="free", min_count=20, gpus=8))  # no topology: not asked
    other.filter(names[0])
    await settled()
    assert world.actions.scale_ups == {} and other.actions.scale_ups == {}


async def test_requests_of_an_earlier_quorum_that_no_gang_owns_are_deleted_after_sync() -> None:
    world = scaling_world()
    for name, labels in (("quorum-old-1234", {"app.kubernetes.io/managed-by": "quorum"}), ("users", {})):
        obj: dict[str, Any] = {"metadata": {"namespace": "ml", "name": name, "labels": labels}}
        world.cache.scale_ups.upsert(obj)
    world.coordinator.provisioner.sweep()
    await settled()
    assert world.actions.deleted_scale_ups == ["ml/quorum-old-1234"]


async def test_the_request_goes_when_the_gangs_pods_are_deleted() -> None:
    world = scaling_world()
    names = rack_gang(world)
    world.filter(names[0])
    await settled()
    (key,) = world.actions.scale_ups
    for name in names[:-1]:
        world.cache.delete_pod(world.pods[name])
    await settled()
    assert world.actions.deleted_scale_ups == []  # a member is left: the room is still needed
    world.cache.delete_pod(world.pods[names[-1]])
    await settled()
    assert world.actions.deleted_scale_ups == [key]


def test_capacity_is_not_found_is_a_refusal() -> None:
    """best-effort-atomic answers a request it cannot place whole with Provisioned=False; it never
    sets Failed for it (it retries on its own later)."""
    condition = {"type": "Provisioned", "status": "False", "reason": "CapacityIsNotFound",
                 "message": "Capacity is not found, CA will try to find it later."}
    refused = status_of({"metadata": {}, "status": {"conditions": [condition]}})
    assert refused.state == "Failed"
    assert refused.message.startswith("CapacityIsNotFound: Capacity is not found")
    waiting = status_of({"metadata": {}, "status": {"conditions": [{**condition, "reason": "Pending"}]}})
    assert waiting.state == ""


async def test_a_gang_whose_pods_consume_a_request_is_asked_for_without_a_filter_call() -> None:
    """No node passes kube-scheduler's own filters, so Quorum is never asked; the autoscaler leaves
    such pods to their request. Quorum makes it, under the annotation's name, once the gang is whole."""
    world = scaling_world()
    consumer_gang(world, made=3)
    await settled()
    assert world.actions.scale_ups == {}  # 3 of 4: not a gang yet
    world.add(consuming(gang_pod("train3", podgroup="train", gpus=8), "train-capacity"))
    await settled()
    (key, asked), = world.actions.scale_ups.items()
    # The rack missing the least (2 of 4), asked for the whole gang: the autoscaler may count the
    # pending pods and the request against the same free nodes.
    assert key == "ml/train-capacity" and asked["count"] == 4 and asked["selector"] == {RACK: "b0-r0"}
    reason = world.coordinator.registry.gangs["ml/train"].reason
    assert reason.startswith("no node can take it now; asked the autoscaler for room for 4 more"), reason


async def test_a_consuming_gang_without_a_required_domain_is_asked_for_anywhere() -> None:
    world = scaling_world()
    consumer_gang(world, size=10, rack=False)  # 8 free nodes: 2 missing
    await settled()
    (asked,) = world.actions.scale_ups.values()
    assert asked["selector"] == {} and asked["count"] == 10 and asked["together"] == ""


async def test_with_no_node_in_any_rack_the_request_keeps_its_pods_in_one_rack() -> None:
    world = scaling_world(racks=0)
    consumer_gang(world)
    await settled()
    (asked,) = world.actions.scale_ups.values()
    assert asked["selector"] == {} and asked["together"] == RACK and asked["count"] == 4
    assert "in any one rack" in world.coordinator.registry.gangs["ml/train"].reason


async def test_gangs_without_the_annotation_are_asked_for_only_from_filter() -> None:
    world = scaling_world()
    world.cache.upsert_podgroup(make_podgroup("plain", 4, topology_key=RACK))
    for i in range(4):
        pod = gang_pod(f"plain{i}", podgroup="plain", gpus=8)
        pod["status"] = {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
        world.add(pod)
    await settled()
    assert world.actions.scale_ups == {}  # the autoscaler scales up for these pods on its own


async def test_a_request_replaced_under_the_same_name_is_deleted_before_it_is_made_again() -> None:
    world = scaling_world()
    log: list[str] = []
    create, delete = world.actions.create_scale_up, world.actions.delete_scale_up

    async def slow_delete(namespace: str, name: str) -> bool:
        log.append("delete started")
        for _ in range(3):
            await asyncio.sleep(0)
        log.append("delete done")
        return await delete(namespace, name)

    async def logged_create(*args: Any) -> bool:
        log.append(f"create {args[3][RACK]}")
        return await create(*args)

    world.actions.delete_scale_up = slow_delete  # type: ignore[method-assign,assignment]
    world.actions.create_scale_up = logged_create  # type: ignore[method-assign,assignment]
    consumer_gang(world)
    await settled()
    answered(world, "Failed", "CapacityIsNotFound: max node group size reached")  # b0-r0 refused
    for _ in range(12):
        await asyncio.sleep(0)
    assert log == ["create b0-r0", "delete started", "delete done", "create b0-r1"]
    assert list(world.actions.scale_ups) == ["ml/train-capacity"]


async def test_a_request_someone_else_made_under_that_name_is_left_alone() -> None:
    world = scaling_world()
    world.cache.scale_ups.upsert({"metadata": {"namespace": "ml", "name": "train-capacity"}})
    consumer_gang(world)
    await settled()
    assert world.actions.scale_ups == {}
    assert "consume ProvisioningRequest train-capacity" in world.coordinator.registry.gangs["ml/train"].reason


async def test_refused_domains_are_asked_again_after_a_while() -> None:
    now = [1000.0]
    world = scaling_world(clock=lambda: now[0])
    consumer_gang(world)
    for _ in range(4):
        await settled()
        answered(world, "Failed", "CapacityIsNotFound")
    await settled()
    assert world.actions.scale_ups == {}
    assert "the autoscaler cannot add it in any rack" in world.coordinator.registry.gangs["ml/train"].reason
    now[0] += REFUSAL_MEMORY_SECONDS + 1
    world.coordinator.provisioner.consider("ml/train")
    await settled()
    assert len(world.actions.scale_ups) == 1
