"""Gang members that their own nodeSelectors pin to different nodes or domains.

Kueue's topology-aware scheduling writes each pod's domain into its nodeSelector when it lets the
pod go; with a Topology whose lowest level is the node, every member is pinned to its own node, and
kube-scheduler offers each member only that node. Quorum places each member where its pins allow.
(Seen end to end: a Kueue-admitted Job waited for ever, "needs 4 x {...}; best rack fits 1".)
"""

from __future__ import annotations

import asyncio
from typing import Any

from extender.cluster.records import PodRecord, pod_record
from extender.gang.planning import honour_nominations
from extender.topology.model import CandidateNode, Member, NoFit, Placement
from extender.topology.pinned import PinnedGroup, place_pinned

from .fixtures import World, gang_pod
from .payloads import BLOCK, HOST, RACK, make_node

LEVELS = ("block", "rack", "host")


def pinned(obj: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    obj["spec"]["nodeSelector"] = selector
    return obj


def host_pinned(obj: dict[str, Any], node: str) -> dict[str, Any]:
    return pinned(obj, {HOST: node})


def kueue_gang(world: World, hosts: list[str], gpus: int, required: str | None = "rack") -> None:
    for i, host in enumerate(hosts):
        world.add(host_pinned(gang_pod(f"k{i}", gang="k", min_count=len(hosts), gpus=gpus,
                                       required=required), host))


async def test_members_pinned_each_to_its_node_are_reserved_there_and_bind_whole() -> None:
    world = World()
    hosts = ["b0-r0-n0", "b0-r0-n0", "b0-r0-n1", "b0-r0-n1"]
    kueue_gang(world, hosts, gpus=4)
    first = world.filter("k2", ["b0-r0-n1"])  # kube-scheduler offers a pinned pod its node only
    assert first.passing == ["b0-r0-n1"], world.coordinator.reason_of("ml/k")
    assert world.coordinator.reservation_of("ml/k") == {f"uid-k{i}": h for i, h in enumerate(hosts)}
    for i, host in enumerate(hosts):
        assert world.filter(f"k{i}", [host]).passing == [host]
    results = await asyncio.gather(*(world.bind(f"k{i}", host) for i, host in enumerate(hosts)))
    assert list(results) == [""] * 4
    assert world.coordinator.phase_of("ml/k") == "Bound"
    assert world.coordinator.check_invariants() == []


async def test_a_member_pinned_to_a_full_node_holds_nothing_and_says_where() -> None:
    world = World()
    world.add(gang_pod("busy", node_name="b0-r0-n1", gpus=8))
    kueue_gang(world, ["b0-r0-n0", "b0-r0-n1"], gpus=4)
    assert world.filter("k0", ["b0-r0-n0"]).passing == []
    reason = world.coordinator.reason_of("ml/k")
    assert f"members pinned to {HOST}=b0-r0-n1" in reason, reason
    assert world.coordinator.reservation_of("ml/k") == {}


async def test_members_pinned_to_different_racks_are_each_placed_in_their_own() -> None:
    world = World()
    for i in range(4):
        rack = "b0-r0" if i % 2 == 0 else "b1-r1"
        world.add(pinned(gang_pod(f"k{i}", gang="k", min_count=4, gpus=8), {BLOCK: rack[:2], RACK: rack}))
    offered = ["b0-r0-n0", "b0-r0-n1"]  # k0's nodeSelector allows its rack only
    assert world.filter("k0", offered).passing, world.coordinator.reason_of("ml/k")
    racks = {uid: node.rsplit("-", 1)[0] for uid, node in world.coordinator.reservation_of("ml/k").items()}
    assert racks == {"uid-k0": "b0-r0", "uid-k1": "b1-r1", "uid-k2": "b0-r0", "uid-k3": "b1-r1"}


async def test_a_host_pin_is_the_hostname_label_not_the_node_name() -> None:
    world = World()
    node = make_node("ip-10-0-0-7", "b0", "b0-r0")
    node["metadata"]["labels"][HOST] = "worker-7"
    world.cache.upsert_node(node)
    kueue_gang(world, ["b0-r0-n0", "worker-7"], gpus=8)
    assert world.filter("k0", ["b0-r0-n0"]).passing == ["b0-r0-n0"], world.coordinator.reason_of("ml/k")
    assert world.coordinator.reservation_of("ml/k") == {"uid-k0": "b0-r0-n0", "uid-k1": "ip-10-0-0-7"}


async def test_members_pinned_alike_are_planned_as_before() -> None:
    """Pins all members share (Kueue at the rack level) change nothing: the offered nodes are theirs."""
    world = World()
    for i in range(2):
        world.add(pinned(gang_pod(f"k{i}", gang="k", min_count=2, gpus=8, required="rack"),
                         {RACK: "b1-r0"}))
    assert world.filter("k0", ["b1-r0-n0", "b1-r0-n1"]).passing
    assert sorted(world.coordinator.reservation_of("ml/k").values()) == ["b1-r0-n0", "b1-r0-n1"]


def node(name: str, gpus: int = 8) -> CandidateNode:
    block, rack, _ = name.split("-")
    return CandidateNode(name, (block, f"{block}-{rack}", name), {"gpu": gpus}, 110)


def member(key: str, gpus: int) -> Member:
    return Member(key, {"gpu": gpus})


def test_what_one_group_takes_is_gone_for_the_next() -> None:
    shared = node("b0-r0-n0")
    groups = [PinnedGroup("a", [shared], [member("a0", 6)]),
              PinnedGroup("b", [shared, node("b0-r0-n1")], [member("b0", 6)])]
    result = place_pinned(groups, LEVELS, None, None)
    assert isinstance(result, Placement)
    assert result.assignment == {"a0": "b0-r0-n0", "b0": "b0-r0-n1"}


def test_the_first_group_fixes_the_required_domain_for_the_rest() -> None:
    groups = [PinnedGroup("a", [node("b0-r0-n0")], [member("a0", 8)]),
              PinnedGroup("b", [node("b0-r1-n0"), node("b0-r1-n1")], [member("b0", 8)])]
    result = place_pinned(groups, LEVELS, 1, None)  # one rack required: the pins disagree
    assert isinstance(result, NoFit)
    assert result.reason.startswith("members pinned to b:"), result.reason
    assert isinstance(place_pinned(groups, LEVELS, 0, None), Placement)  # one block: they agree



def test_members_pinned_differently_never_swap_nodes_for_a_nomination() -> None:
    def record(name: str, host: str, nominated: str = "") -> PodRecord:
        obj = host_pinned(gang_pod(name, gang="k", min_count=2, gpus=8), host)
        obj["status"]["nominatedNodeName"] = nominated
        return pod_record(obj, "ml/k")

    pending = {"uid-a": record("a", "n1", nominated="n2"), "uid-b": record("b", "n2")}
    placement = {"uid-a": "n1", "uid-b": "n2"}
    assert honour_nominations(placement, pending, {"n1"}, "uid-a") == placement
