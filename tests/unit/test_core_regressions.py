"""Regression tests for defects of the gang core found by generated input and peer scenarios.

Each test names the defect it guards; each was seen to fail with its fix reverted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from extender.cluster.cache_events import CACHES_SYNCED, CacheEvent
from extender.config import GangTimings
from extender.gang.ledger import CapacityLedger, DoubleReservation
from extender.gang.timers import doubling
from extender.topology.placement import NoFit

from .fixtures import World, gang_of, gang_pod, make_node, make_pod, make_podgroup, typed
from .fixtures import gang_pod as pod


async def test_a_pod_is_never_reserved_by_two_gangs_when_the_request_names_another_gang() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=2, prefix="a")
    world.filter("a0")
    assert set(world.coordinator.reservation_of("ml/a")) == {"uid-a0", "uid-a1"}
    # The same pod (same uid) arrives at filter claiming gang b with min-count 1.
    imposter = pod("a0", gang="b", min_count=1, gpus=2)
    decision = world.coordinator.filter(*typed(imposter), world.names)
    assert world.coordinator.reservation_of("ml/b") == {}
    # The cache's view wins: it is answered as a member of gang a, on its reserved node.
    assert decision.passing == [world.coordinator.reservation_of("ml/a")["uid-a0"]]
    assert world.coordinator.check_invariants() == []


def test_the_ledger_refuses_a_second_gang_for_a_reserved_pod() -> None:
    world = World()
    ledger = CapacityLedger(world.cache)
    ledger.reserve("ml/a", "uid-x", "b0-r0-n0", {"nvidia.com/gpu": 1})
    with pytest.raises(DoubleReservation):
        ledger.reserve("ml/b", "uid-x", "b0-r0-n1", {"nvidia.com/gpu": 1})
    assert ledger.check() == []


async def test_a_member_whose_reservation_was_released_before_its_bind_is_not_bound_alone() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8, required="rack")
    node0 = world.filter("w0").passing[0]
    # The reservation goes away between w0's filter answer and its bind call (here: the other
    # member's reserved node is deleted; a re-plan or backoff has the same effect).
    other = world.coordinator.reservation_of("ml/w")["uid-w1"]
    world.cache.delete_node(other)
    assert world.coordinator.reservation_of("ml/w") == {}
    answer = await world.bind("w0", node0)
    assert "holds no reservation" in answer
    assert world.actions.bound == []
    assert world.sample("quorum_binds_total", outcome="refused") == 1


async def test_members_whose_binds_are_in_flight_are_not_repaired_as_missing() -> None:
    world = World()
    names = gang_of(world, 4, min_count=4, gpus=8)
    world.filter("w0")
    reservation = world.coordinator.reservation_of("ml/w")
    answers = await asyncio.gather(*(world.bind(n, reservation[f"uid-{n}"]) for n in names))
    assert answers == ["", "", "", ""]
    # The watch has shown two of the four bindings so far; the other two are still in flight.
    for name in names[:2]:
        world.bind_in_cache(name, reservation[f"uid-{name}"])
    assert world.coordinator.phase_of("ml/w") == "Bound"
    # Another gang is placed now; the bound gang must not be "repaired" onto fresh nodes.
    world.actions.requeues.clear()
    gang_of(world, 1, min_count=1, gpus=8, prefix="v")
    world.filter("v0")
    assert world.coordinator.reservation_of("ml/w") == {}
    assert not set(world.actions.requeued) & set(names)  # no pointless nudges for bound pods
    assert world.coordinator.check_invariants() == []


async def test_filter_calls_naming_gangs_that_do_not_exist_leave_no_phantom_gangs() -> None:
    world = World()
    for i in range(50):
        ghost = pod(f"ghost{i}", gang=f"nowhere{i}", min_count=3)
        world.coordinator.filter(*typed(ghost), world.names)
    assert world.coordinator.gangs() == []
    assert world.coordinator.snapshot() == []


async def test_waiting_gangs_get_one_nudge_once_the_caches_have_synced_after_a_restart() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    gang_of(world, 1, min_count=3, prefix="short")  # still short of members: nudged too, harmless
    world.coordinator.on_cache_event(CacheEvent(CACHES_SYNCED, ""))
    await asyncio.sleep(0.01)
    assert sorted(world.actions.requeued) == ["short0", "w0"]


@pytest.mark.parametrize("policy", [None, 2], ids=["basic", "gang"])
async def test_pods_rejected_before_their_podgroup_existed_are_woken_when_it_appears(
        policy: int | None) -> None:
    world = World()
    for i in range(2):
        world.add(pod(f"s{i}", podgroup="svc"))
    assert "waiting for its PodGroup" in world.filter("s0").unresolvable["b0-r0-n0"]
    world.add(pod("s2", podgroup="svc"))  # not tried yet: kube-scheduler has it queued, not parked
    world.cache.upsert_podgroup(make_podgroup("svc", policy))
    await asyncio.sleep(0.01)
    assert world.actions.requeued == ["s0"]
    # The reason shown for the gang no longer says it waits for its PodGroup.
    assert "waiting for its PodGroup" not in world.coordinator.reason_of("ml/svc")
    assert len(world.filter("s0").passing) >= 1


async def test_nodes_missing_a_topology_label_are_not_placed_into_as_a_domain() -> None:
    world = World(racks=1, nodes_per_rack=1)
    # Two nodes without rack and block labels: together they would hold the gang.
    for name in ("loose-0", "loose-1"):
        world.cache.upsert_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                                 "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                                            "nvidia.com/gpu": "8"}}})
    candidates = ["loose-0", "loose-1"]
    gang_of(world, 2, min_count=2, gpus=8, preferred="rack")
    decision = world.filter("w0", candidates)
    assert decision.passing == []
    # A gang that asks for no topology may still use them.
    gang_of(world, 2, min_count=2, gpus=8, prefix="free")
    assert world.filter("free0", candidates).passing


async def test_filter_answers_name_only_nodes_from_the_request_even_with_duplicates() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    world.filter("w0")
    reserved = sorted(world.coordinator.reservation_of("ml/w").values())
    world.add(pod("plain", gpus=8))
    free = next(n for n in world.names if n not in reserved)
    candidates = [reserved[1], reserved[1], free]  # the other reserved node is not offered
    decision = world.filter("plain", candidates)
    assert set(decision.unresolvable) <= set(candidates)
    assert set(decision.passing) <= set(candidates)


async def test_an_unseen_pod_reserved_for_one_gang_cannot_be_claimed_by_another() -> None:
    world = World()
    first = pod("p", gang="g1", min_count=1, gpus=1)  # never delivered by the watch
    assert len(world.coordinator.filter(*typed(first), world.names).passing) == 1
    second = pod("p", gang="g2", min_count=1, gpus=1)  # same uid, another gang
    decision = world.coordinator.filter(*typed(second), world.names)
    assert decision.passing == []
    assert "reserved for gang ml/g1, not ml/g2" in decision.unresolvable["b0-r0-n0"]
    assert set(world.coordinator.reservation_of("ml/g1")) == {"uid-p"}
    assert world.coordinator.reservation_of("ml/g2") == {}
    assert world.coordinator.check_invariants() == []


async def test_a_node_offered_twice_counts_its_capacity_once() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    decision = world.filter("w0", ["b0-r0-n0", "b0-r0-n0"])
    assert decision.passing == []
    assert "fit 1" in decision.unresolvable["b0-r0-n0"]
    assert world.coordinator.check_invariants() == []


async def test_a_bind_that_skipped_filter_cannot_take_reserved_capacity() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    world.filter("w0")
    reserved = sorted(world.coordinator.reservation_of("ml/w").values())
    world.add(pod("plain", gpus=8))
    answer = await world.bind("plain", reserved[0])
    assert "capacity reserved for gang ml/w" in answer
    assert world.actions.bound == []
    free = next(n for n in world.names if n not in reserved)
    assert await world.bind("plain", free) == ""  # anywhere else it binds
    assert world.coordinator.check_invariants() == []


async def test_a_reserved_node_that_shrinks_below_its_reservation_releases_the_gang() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    world.filter("w0")
    node = world.coordinator.reservation_of("ml/w")["uid-w0"]
    shrunk = make_node(node, *world.cache.nodes[node].domains[:2], gpus=4)
    world.cache.upsert_node(shrunk)
    assert world.coordinator.reservation_of("ml/w") == {}
    assert world.sample("quorum_reservation_releases_total", reason="node-changed") == 1
    assert world.coordinator.check_invariants() == []
    assert len(world.filter("w0").passing) == 1  # placed again, around the smaller node


async def test_a_min_count_raised_by_annotations_takes_a_bound_gang_out_of_bound() -> None:
    world = World()
    for i, node in enumerate(["b0-r0-n0", "b0-r0-n1"]):
        world.add(pod(f"w{i}", gang="w", min_count=2, node_name=node))
    world.add(pod("w2", gang="w", min_count=2))
    world.filter("w2")
    assert world.coordinator.phase_of("ml/w") == "Bound"
    world.add(pod("w2", gang="w", min_count=3))  # the declaration moves to 3 with a pod update
    assert world.coordinator.phase_of("ml/w") != "Bound"
    assert world.coordinator.check_invariants() == []
    await asyncio.sleep(0.01)
    assert world.actions.requeued == []  # annotation changes never nudge (no feedback loop)


async def test_a_pod_bound_outside_quorum_onto_reserved_capacity_makes_the_gang_replan() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    world.filter("w0")
    node = world.coordinator.reservation_of("ml/w")["uid-w0"]
    world.add(pod("intruder", gpus=8, node_name=node))  # another scheduler bound it there
    assert world.coordinator.reservation_of("ml/w") == {}
    assert world.coordinator.check_invariants() == []
    decision = world.filter("w0")
    assert len(decision.passing) == 1 and decision.passing != [node]


async def test_a_podgroup_switched_to_the_basic_policy_releases_its_reservation() -> None:
    world = World()
    world.cache.upsert_podgroup(make_podgroup("g", 2))
    for i in range(2):
        world.add(gang_pod(f"g{i}", podgroup="g", gpus=8))
    world.filter("g0")
    assert world.coordinator.reservation_of("ml/g")
    world.cache.upsert_podgroup(make_podgroup("g", None))
    assert world.coordinator.reservation_of("ml/g") == {}
    assert world.filter("g1").passing == world.names
    assert await world.bind("g1", "b1-r1-n1") == ""
    assert world.coordinator.check_invariants() == []


async def test_a_bound_gang_whose_min_count_rises_during_an_old_backoff_is_not_in_backoff() -> None:
    now = [1000.0]
    world = World(GangTimings(bind_timeout_seconds=0.01, backoff_base_seconds=60, backoff_max_seconds=60),
                  clock=lambda: now[0])
    world.cache.upsert_podgroup(make_podgroup("g", 3))
    world.add(gang_pod("g0", podgroup="g", node_name="b0-r0-n0"))
    for i in (1, 2):
        world.add(gang_pod(f"g{i}", podgroup="g"))
    world.filter("g1")
    await world.bind("g1", world.coordinator.reservation_of("ml/g")["uid-g1"])  # 2/3: times out
    assert world.coordinator.phase_of("ml/g") == "Backoff"
    world.cache.upsert_podgroup(make_podgroup("g", 1))  # one member runs: Bound, backoff moot
    assert world.coordinator.phase_of("ml/g") == "Bound"
    world.cache.upsert_podgroup(make_podgroup("g", 3))  # raised again (strict: no illegal move)
    assert world.coordinator.phase_of("ml/g") in ("Pending", "WaitingForMembers")


def test_a_gang_already_at_quorum_is_never_planned_as_an_empty_placement() -> None:
    """minCount lowered to what already runs, no node offered: the plan is a no-fit, not an empty
    placement the caller would reserve (found by a 1,000-example stateful run: a KeyError in
    filter, and a Recovering gang turned Reserved)."""
    world = World()
    world.cache.upsert_podgroup(make_podgroup("g", 1))
    members = {}
    for i in range(3):
        obj = make_pod(f"g{i}", f"uid-g{i}", group="g", node="b0-r0-n0" if i == 0 else None,
                       phase="Running" if i == 0 else "Pending", gpus=1)
        world.add(obj)
        members[f"uid-g{i}"] = world.cache.pods[f"uid-g{i}"]
    spec = world.cache.gang_spec("ml/g")
    assert spec is not None
    pending = {uid: m for uid, m in members.items() if m.pending}
    result = world.coordinator.planner.plan(spec, pending, [], ["b0-r0-n0"], "uid-g1")
    assert isinstance(result, NoFit), result


async def test_a_member_already_bound_is_answered_its_node_not_a_server_error() -> None:
    # kube-scheduler's cache lags the watch: it filters a member Quorum already sees bound (a
    # bind retried whose answer it never got) while a mate is still pending.
    world = World(racks=1, nodes_per_rack=1)
    n0, n1 = world.names
    world.add(pod("w0", gang="w", min_count=2, node_name=n0))
    world.add(pod("w1", gang="w", min_count=2))
    decision = world.filter("w0", [n0, n1])
    assert decision.passing == [n0]
    elsewhere = world.filter("w0", [n1])
    assert elsewhere.passing == []
    assert elsewhere.unresolvable[n1] == f"pod ml/w0 is already bound to node {n0}"
    assert world.coordinator.check_invariants() == []


def unseen(world: World, obj: dict[str, Any]) -> dict[str, Any]:
    """A pod kube-scheduler has, that the watch has not delivered (world.filter/bind know it)."""
    world.pods[obj["metadata"]["name"]] = obj
    return obj


async def test_a_pod_bound_before_the_watch_showed_it_counts_its_requests_on_the_node() -> None:
    """The stateful run's "node over-committed (nvidia.com/gpu)": with the watch lagging, a plain
    pod was filtered and bound, in flight with no requests; a gang then reserved the whole node."""
    world = World()
    unseen(world, pod("plain", gpus=2))
    node = world.filter("plain").passing[0]
    assert await world.bind("plain", node) == ""
    free, _ = world.coordinator.core.ledger.free(node, None) or ({}, 0)
    assert free["nvidia.com/gpu"] == 6
    gang_of(world, 1, min_count=1, gpus=8, prefix="w")
    decision = world.filter("w0", [node])
    assert decision.passing == [], "a gang was offered capacity a bound pod uses"
    world.add(world.pods["plain"])
    world.bind_in_cache("plain", node)  # the watch catches up
    assert world.coordinator.check_invariants() == []


async def test_a_bind_before_the_watch_cannot_take_reserved_capacity() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    world.filter("w0")
    reserved = sorted(world.coordinator.reservation_of("ml/w").values())
    unseen(world, pod("plain", gpus=8))
    world.filter("plain")
    answer = await world.bind("plain", reserved[0])
    assert "capacity reserved for gang ml/w" in answer
    assert world.actions.bound == []
    assert world.coordinator.check_invariants() == []


def test_doubling_delays_stay_finite_for_any_count() -> None:
    assert [doubling(5, n, 300) for n in (-1, 0, 1, 3, 6)] == [5, 5, 10, 40, 300]
    assert doubling(5, 1100, 300) == 300  # 5 * 2**1100 overflows a float


async def test_a_gang_that_missed_quorum_a_thousand_times_still_backs_off() -> None:
    """The fuzz run's 'OverflowError: int too large to convert to float' in the bind deadline's
    timer: a gang that kept missing its quorum made the backoff 2**1100 seconds."""
    now = [1000.0]
    world = World(GangTimings(bind_timeout_seconds=0.01, backoff_base_seconds=0.5, backoff_max_seconds=1.5),
                  clock=lambda: now[0])
    gang_of(world, 2, min_count=2)
    world.filter("w0")
    world.coordinator.registry.gangs["ml/w"].failures = 1100  # as after days of misses
    await world.bind("w0", world.coordinator.reservation_of("ml/w")["uid-w0"])
    assert "backing off 1.5s" in world.coordinator.reason_of("ml/w")
    cap = world.coordinator.core.config.lifecycle.backoff_max_seconds
    assert world.coordinator.lifecycle.backoff_delay(5000) >= cap  # the requeue backoff too
