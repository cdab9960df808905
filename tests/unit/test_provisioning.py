"""Topology-aware scale-up: a required-rack gang that fits in no rack asks cluster-autoscaler for
its capacity in the rack where the fewest members are missing, then the next when refused, and
its request goes when the gang binds or is deleted."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from extender.config import Autoscaling, Config
from extender.gang.coordinator import Coordinator

from .fixtures import World, bound, gang_pod, make_podgroup

RACK = "topology.quorum.dev/rack"


def scaling_world(enabled: bool = True) -> World:
    """2 blocks × 2 racks × 2 nodes of 8 GPUs; gangs of 4 whole nodes that require a rack fit nowhere."""
    world = World(racks=2, nodes_per_rack=2)
    world.cache.listeners.clear()
    config = replace(Config(), autoscaling=Autoscaling(provisioning_requests=enabled))
    world.coordinator = Coordinator(config, world.cache, world.actions, world.metrics, strict=True)
    return world


def rack_gang(world: World, name: str = "train", size: int = 4) -> list[str]:
    world.cache.upsert_podgroup(make_podgroup(name, size, topology_key=RACK))
    names = [f"{name}{i}" for i in range(size)]
    for pod_name in names:
        world.add(gang_pod(pod_name, podgroup=name, gpus=8))
    return names


def answered(world: World, status: str, message: str = "") -> None:
    """The autoscaler's answer to every request Quorum made, as the informer delivers it."""
    for key in list(world.actions.scale_ups):
        namespace, name = key.split("/")
        condition = {"type": status, "status": "True", "reason": status, "message": message}
        world.cache.scale_ups.upsert({"metadata": {"namespace": namespace, "name": name,
                                                   "labels": {"app.kubernetes.io/managed-by": "quorum"}},
                                      "status": {"conditions": [condition]}})


async def test_a_gang_that_fits_in_no_rack_asks_for_the_rack_missing_the_least() -> None:
    world = scaling_world()
    world.add(bound(gang_pod("busy", gpus=8), "b0-r0-n0"))  # rack b0-r0 misses 3, the others 2
    names = rack_gang(world)
    decision = world.filter(names[0])
    await asyncio.sleep(0)
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
        await asyncio.sleep(0)
        asked += [v["selector"][RACK] for v in world.actions.scale_ups.values()]
        answered(world, "Failed", "CapacityIsNotFound: max node group size reached")
    assert asked == ["b0-r0", "b0-r1", "b1-r0", "b1-r1"]
    reason = world.filter(names[0]).reason
    assert "the autoscaler cannot add it in any rack" in reason and "max node group size reached" in reason
    await asyncio.sleep(0)
    assert world.actions.scale_ups == {}
    assert len(world.actions.deleted_scale_ups) == 4


async def test_the_request_goes_when_the_gang_binds_or_is_deleted() -> None:
    world = scaling_world()
    names = rack_gang(world)
    world.filter(names[0])
    await asyncio.sleep(0)
    (key,) = world.actions.scale_ups
    answered(world, "Provisioned")
    assert "(Provisioned)" in world.filter(names[0]).reason
    world.cache.delete_podgroup(make_podgroup("train", 4))
    await asyncio.sleep(0)
    assert world.actions.deleted_scale_ups == [key]


async def test_off_by_default_and_only_for_a_required_domain() -> None:
    world = scaling_world(enabled=False)
    world.filter(rack_gang(world)[0])
    other = scaling_world()
    names = [f"free{i}" for i in range(20)]
    for name in names:
        other.add(gang_pod(name, gang="free", min_count=20, gpus=8))  # no topology: not asked
    other.filter(names[0])
    await asyncio.sleep(0)
    assert world.actions.scale_ups == {} and other.actions.scale_ups == {}


async def test_requests_of_an_earlier_quorum_that_no_gang_owns_are_deleted_after_sync() -> None:
    world = scaling_world()
    for name, labels in (("quorum-old-1234", {"app.kubernetes.io/managed-by": "quorum"}), ("users", {})):
        obj: dict[str, Any] = {"metadata": {"namespace": "ml", "name": name, "labels": labels}}
        world.cache.scale_ups.upsert(obj)
    world.coordinator.provisioner.sweep()
    await asyncio.sleep(0)
    assert world.actions.deleted_scale_ups == ["ml/quorum-old-1234"]


async def test_the_request_goes_when_the_gangs_pods_are_deleted() -> None:
    world = scaling_world()
    names = rack_gang(world)
    world.filter(names[0])
    await asyncio.sleep(0)
    (key,) = world.actions.scale_ups
    for name in names[:-1]:
        world.cache.delete_pod(world.pods[name])
    await asyncio.sleep(0)
    assert world.actions.deleted_scale_ups == []  # a member is left: the room is still needed
    world.cache.delete_pod(world.pods[names[-1]])
    await asyncio.sleep(0)
    assert world.actions.deleted_scale_ups == [key]
