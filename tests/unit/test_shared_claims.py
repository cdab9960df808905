"""A claim a gang's members share (a PodGroup's ``spec.resourceClaims``): counted once, on one node.

With ``DRAWorkloadResourceClaims`` on, the members of a PodGroup name its claim, and kube-scheduler
allocates that one ResourceClaim for the PodGroup (``reservedFor`` a podgroup, not the pods). Its
devices count once for the gang (carried by one member) and every member runs on their node.
"""

from __future__ import annotations

import copy
from typing import Any

from extender.topology.colocated import members_held, place_on_one_node
from extender.topology.model import CandidateNode, Member, NoFit, Placement, format_resources

from .dra_objects import claim, exactly, with_claim, with_template
from .fixtures import World, gang_pod, schedule
from .test_devices import KIND, SOURCES, dra_world, free_devices

GANG = "trainer"


def podgroup_claim(obj: dict[str, Any], allocated_on: str = "", devices: range = range(0)) -> dict[str, Any]:
    """The claim as kube-scheduler leaves it for a PodGroup: reserved for the group, not for pods."""
    out = copy.deepcopy(obj)
    if allocated_on:
        out = claim(out["metadata"]["name"], *out["spec"]["devices"]["requests"], allocated_on=allocated_on,
                    devices=devices)
        out["status"]["reservedFor"] = [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                                         "name": GANG, "uid": "pg-uid"}]
    return out


def shared_gang(world: World, size: int, claim_name: str = "shared", gang: str = GANG,
                prefix: str = "m") -> list[str]:
    names = [f"{prefix}{i}" for i in range(size)]
    for name in names:
        world.add(with_claim(gang_pod(name, gang=gang, min_count=size, gpus=0), claim_name))
    return names


def devices_of(world: World, name: str) -> int:
    return world.cache.pods[f"uid-{name}"].requests.get(KIND, 0)


def test_a_claim_every_member_names_is_counted_once_by_one_member() -> None:
    world, feed = dra_world()
    feed.upsert(SOURCES["resourceclaims"], claim("shared", exactly(8)))
    names = shared_gang(world, 4)
    assert [devices_of(world, n) for n in names] == [8, 0, 0, 0]  # the carrier: the smallest uid
    shared = world.cache.pods["uid-m1"].shared_claim
    assert shared is not None and shared.key == "ml/shared" and not shared.carrier


async def test_a_gang_sharing_a_claim_binds_whole_on_the_one_node_with_its_devices() -> None:
    world, feed = dra_world(devices=8)
    feed.upsert(SOURCES["resourceclaims"], claim("shared", exactly(8)))
    names = shared_gang(world, 4)
    nodes = await schedule(world, names)
    assert len(set(nodes.values())) == 1, nodes
    assert set(nodes.values()) <= set(world.names[:4])  # a node that publishes the devices


def test_a_gang_whose_shared_claim_no_node_can_hold_binds_nothing_and_says_why() -> None:
    world, feed = dra_world(devices=4)
    feed.upsert(SOURCES["resourceclaims"], claim("shared", exactly(8)))
    shared_gang(world, 2)
    decision = world.filter("m0")
    assert decision.passing == []
    assert "gang ml/trainer shares ResourceClaim ml/shared among its members, so all 2" in decision.reason, \
        decision.reason
    assert "must run on one node; the best candidate node holds 0" in decision.reason, decision.reason


def test_members_that_fit_the_cluster_but_not_one_node_are_held_back() -> None:
    world, feed = dra_world(devices=8)
    feed.upsert(SOURCES["resourceclaims"], claim("shared", exactly(2)))
    for i in range(3):  # 3 members of 40 cpu: one node (64 cpu) holds one; the cluster holds all three
        world.add(with_claim(gang_pod(f"m{i}", gang=GANG, min_count=3, gpus=0, cpu="40"), "shared"))
    decision = world.filter("m0")
    assert decision.passing == [] and "the best candidate node holds 1" in decision.reason, decision.reason


async def test_allocated_for_the_podgroup_while_every_member_waits_the_devices_stay_the_carriers() -> None:
    """kube-scheduler allocated the claim in the first member's cycle; its bind is held: the node's
    devices are not counted twice (taken and demanded), so the gang still fits there."""
    world, feed = dra_world(devices=8)
    obj = claim("shared", exactly(8))
    feed.upsert(SOURCES["resourceclaims"], obj)
    shared_gang(world, 4)
    node = world.names[0]
    feed.upsert(SOURCES["resourceclaims"], podgroup_claim(obj, allocated_on=node, devices=range(8)))
    assert free_devices(world, node) == 8 and devices_of(world, "m0") == 8
    assert world.filter("m0").passing == [node]


async def test_once_a_member_is_bound_the_devices_are_taken_and_the_rest_follow_it() -> None:
    world, feed = dra_world(devices=8)
    obj = claim("shared", exactly(4))
    feed.upsert(SOURCES["resourceclaims"], obj)
    names = shared_gang(world, 3)
    nodes = await schedule(world, names)
    node = nodes["m0"]
    feed.upsert(SOURCES["resourceclaims"], podgroup_claim(obj, allocated_on=node, devices=range(4)))
    assert free_devices(world, node) == 4  # the claim's 4 are taken now
    world.cache.delete_pod(world.pods["m2"])
    world.add(with_claim(gang_pod("m3", gang=GANG, min_count=3, gpus=0), "shared"))  # a replacement
    assert devices_of(world, "m3") == 0  # the claim is allocated: nothing more to count
    assert world.filter("m3").passing == [node]


def test_a_podgroup_template_claim_given_to_every_member_is_counted_once() -> None:
    """The claim made from the PodGroup's template, named in each member's status."""
    world, feed = dra_world()
    feed.upsert(SOURCES["resourceclaims"], claim("trainer-gpu-x1", exactly(8)))
    for i in range(3):
        pod = gang_pod(f"m{i}", gang=GANG, min_count=3, gpus=0)
        world.add(with_template(pod, "t8", made="trainer-gpu-x1"))
    assert [devices_of(world, f"m{i}") for i in range(3)] == [8, 0, 0]


def test_a_claim_shared_across_gangs_is_still_refused_until_allocated() -> None:
    world, feed = dra_world()
    feed.upsert(SOURCES["resourceclaims"], claim("shared", exactly(2)))
    shared_gang(world, 1, gang="a", prefix="a")
    shared_gang(world, 1, gang="b", prefix="b")
    assert "shared by 2 pods" in format_resources(world.cache.pods["uid-a0"].requests)
    assert world.cache.pods["uid-a0"].shared_claim is None


def test_a_member_filed_in_another_gang_stops_sharing_and_is_refused() -> None:
    world, feed = dra_world()
    feed.upsert(SOURCES["resourceclaims"], claim("shared", exactly(2)))
    shared_gang(world, 2)
    inventory = world.cache.devices
    accounting = world.cache.device_accounting
    accounting.settle(inventory.set_gang("uid-m1", "other"))
    assert world.cache.pods["uid-m0"].shared_claim is None
    assert "shared by 2 pods" in format_resources(world.cache.pods["uid-m0"].requests)
    accounting.settle(inventory.set_gang("uid-m1", f"ml/{GANG}"))
    assert devices_of(world, "m0") == 2


def test_one_node_placement_keeps_members_apart_from_capacity() -> None:
    nodes = [CandidateNode("a", ("b", "r", "a"), {"cpu": 3}, 10),
             CandidateNode("b", ("b", "r", "b"), {"cpu": 8}, 10)]
    members = [Member(f"m{i}", {"cpu": 2}) for i in range(3)]
    assert members_held(nodes[0], members) == 1
    placed = place_on_one_node(nodes, members, ("block", "rack", "host"), None, None, None, "why")
    assert isinstance(placed, Placement) and set(placed.assignment.values()) == {"b"}
    short = place_on_one_node(nodes[:1], members, ("block", "rack", "host"), None, None, None, "why")
    assert isinstance(short, NoFit) and short.reason.startswith("why, so all 3 members")
