"""Gang mates nominated by kube-scheduler's own preemption (``status.nominatedNodeName``).

kube-scheduler counts a nominated pod as occupying its node when it filters any pod of equal or
lower priority, its gang mates included. After a preemption that made room for a whole gang, each
member is therefore offered only its own nominated node. Quorum plans the gang over the node it is
offered plus its mates' nominated nodes, and reserves each nominated member on its own node.
(Seen end to end: a gang that preempted a lower-priority gang waited for ever, "best rack fits 1".)
"""

from __future__ import annotations

import asyncio
from typing import Any

from extender.cluster.records import pod_record
from extender.gang.planning import honour_nominations

from .fixtures import World, gang_pod

GPU = "nvidia.com/gpu"


def nominated(obj: dict[str, Any], node: str) -> dict[str, Any]:
    obj.setdefault("status", {})["nominatedNodeName"] = node
    return obj


def rack_gang_nominated_crosswise(world: World) -> list[str]:
    """Gang w of 2 x 8 GPUs in one rack; w0 nominated to b0-r0-n1, w1 to b0-r0-n0."""
    names = []
    for i, node in enumerate(("b0-r0-n1", "b0-r0-n0")):
        obj = gang_pod(f"w{i}", gang="w", min_count=2, gpus=8, required="rack")
        world.add(nominated(obj, node))
        names.append(f"w{i}")
    return names


async def test_each_member_offered_only_its_nominated_node_is_reserved_there() -> None:
    world = World()
    rack_gang_nominated_crosswise(world)
    first = world.filter("w0", ["b0-r0-n1"])  # n0 looks taken by w1's nomination
    assert first.passing == ["b0-r0-n1"], world.coordinator.reason_of("ml/w")
    assert world.coordinator.reservation_of("ml/w") == {"uid-w0": "b0-r0-n1", "uid-w1": "b0-r0-n0"}
    assert world.filter("w1", ["b0-r0-n0"]).passing == ["b0-r0-n0"]
    results = await asyncio.gather(world.bind("w0", "b0-r0-n1"), world.bind("w1", "b0-r0-n0"))
    assert list(results) == ["", ""]
    assert world.coordinator.phase_of("ml/w") == "Bound"
    assert world.coordinator.check_invariants() == []


async def test_a_mates_nomination_is_not_offered_capacity_that_is_in_use() -> None:
    """The nominated node is added to the plan only with the ledger's real free capacity."""
    world = World()
    rack_gang_nominated_crosswise(world)
    world.add(gang_pod("other", node_name="b0-r0-n0", gpus=8))  # still running where w1 was nominated
    decision = world.filter("w0", ["b0-r0-n1"])
    assert decision.passing == []
    assert "fits 1" in world.coordinator.reason_of("ml/w")


async def test_a_cached_no_fit_is_dropped_when_mates_are_nominated() -> None:
    world = World()
    for i in range(2):
        world.add(gang_pod(f"w{i}", gang="w", min_count=2, gpus=8, required="rack"))
    assert world.filter("w0", ["b0-r0-n1"]).passing == []  # before any nomination: fits 1
    world.add(nominated(world.pods["w1"], "b0-r0-n0"))
    world.add(nominated(world.pods["w0"], "b0-r0-n1"))
    assert world.filter("w0", ["b0-r0-n1"]).passing == ["b0-r0-n1"]


def record(name: str, gpus: int, node: str = "") -> Any:
    obj = gang_pod(name, gang="g", min_count=3, gpus=gpus)
    if node:
        nominated(obj, node)
    return pod_record(obj, "ml/g")


def test_only_members_of_equal_requests_trade_places() -> None:
    pending = {"uid-a": record("a", 8, node="n2"), "uid-b": record("b", 4), "uid-c": record("c", 8)}
    placement = {"uid-a": "n1", "uid-b": "n2", "uid-c": "n3"}
    # b asks for less than a: swapping them could over-commit n1. a stays; the placement holds.
    assert honour_nominations(placement, pending, {"n1"}, "uid-a") == placement
    pending["uid-b"] = record("b", 8)
    assert honour_nominations(placement, pending, {"n1", "n2"}, "uid-a") == \
        {"uid-a": "n2", "uid-b": "n1", "uid-c": "n3"}


def test_the_filtered_member_gets_a_node_it_was_offered() -> None:
    pending = {"uid-a": record("a", 8), "uid-b": record("b", 8, node="n1"), "uid-c": record("c", 8)}
    placement = {"uid-a": "n1", "uid-b": "n3", "uid-c": "n2"}
    out = honour_nominations(placement, pending, {"n2"}, "uid-a")
    assert out == {"uid-a": "n2", "uid-b": "n1", "uid-c": "n3"}
    assert sorted(out.values()) == sorted(placement.values())


async def test_nominated_mates_are_honoured_when_a_claim_also_keeps_nodes_off() -> None:
    """The claim removes offered nodes while the mates' nominations add one: the list can end up
    no longer than it was offered, and the members must still get their nominated nodes."""
    from .test_queue import QueueWorld

    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    for busy in ("b0-r0-n0", "b1-r0-n0"):  # one node busy in each block: no block fits 4 whole nodes
        world.plain(f"busy-{busy}", node=busy)
    for i in range(4):
        world.add(gang_pod(f"big{i}", gang="big", min_count=4, gpus=8, required="block"))
    world.filter("big0")
    assert world.claim is not None and world.claim.nodes == {"b0-r0-n0", "b0-r0-n1", "b0-r1-n0", "b0-r1-n1"}
    world.clock.now += 1
    for i, node in enumerate(("b1-r1-n1", "b1-r1-n0")):
        world.add(nominated(gang_pod(f"w{i}", gang="w", min_count=2, gpus=8, required="rack"), node))
    decision = world.filter("w0", ["b1-r1-n1", "b0-r0-n1", "b0-r1-n0"])  # its own node, two claimed
    assert decision.passing == ["b1-r1-n1"], world.coordinator.reason_of("ml/w")
    assert world.coordinator.reservation_of("ml/w") == {"uid-w0": "b1-r1-n1", "uid-w1": "b1-r1-n0"}
