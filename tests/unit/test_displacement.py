"""Whole-gang preemption decided by Quorum (``gang/displacement.py``, ``topology/victims.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.gang.retry import RECHECK_DELAY_SECONDS
from extender.topology.claims import ClaimNode
from extender.topology.placement import Member
from extender.topology.victims import Unit, choose_victims

from .fixtures import gang_pod, make_podgroup, schedule, typed
from .test_queue import RACK_KEY, QueueWorld

GPU = "nvidia.com/gpu"
HIGH = 100


async def settle() -> None:
    """Let spawned evictions reach the fake apiserver."""
    for _ in range(10):
        await asyncio.sleep(0)


def low_gang_fills_rack_and_plain_pods_the_rest(world: QueueWorld) -> list[str]:
    """Gang ml/low (priority 10) fills rack b0-r0; plain pods (priority 0) fill every other rack:
    a 2 x 8-GPU rack gang fits nowhere, and one unit (the gang) frees a rack where two pods would."""
    low = world.group("low", 2, rack=True, priority=10, nodes=["b0-r0-n0", "b0-r0-n1"])
    for name in world.names[2:]:
        world.plain(f"plain-{name}", node=name)
    return low


def proposals(world: QueueWorld, names: list[str]) -> dict[str, dict[str, Any]]:
    """kube-scheduler's victims, one node each, as /preempt receives them."""
    return {world.pods[n]["spec"]["nodeName"]: {"Pods": [{"UID": f"uid-{n}"}], "NumPDBViolations": 0}
            for n in names}


async def test_a_waiting_gang_evicts_the_fewest_units_a_lower_gang_whole_and_takes_its_rack() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    high = world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    # One unit (the whole gang, both members) beats two plain pods in another rack.
    assert sorted(world.actions.evicted) == sorted(low)
    assert world.claim is not None and world.claim.gang == "ml/high" and world.claim.domain == "b0/b0-r0"
    assert "Preempting" in world.actions.event_reasons("high")
    assert "Preempted" in world.actions.event_reasons("low")
    assert world.sample("quorum_preemptions_total", kind="gang") == 1
    assert world.sample("quorum_preemptions_total", kind="pod") == 0
    world.check()
    # The victims go; their Job recreates them, and they wait while the preemptor binds there.
    for name in low:
        world.cache.delete_pod(world.pods.pop(name))
    again = world.group("low", 2, rack=True, priority=10)
    assert world.filter(again[0]).passing == []
    placed = await schedule(world, high)
    assert {world.rack_of(n) for n in placed.values()} == {"b0-r0"}
    world.check()


async def test_victims_are_only_ever_of_lower_priority() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    world.group("peer", 2, rack=True, priority=HIGH, nodes=["b0-r0-n0", "b0-r0-n1"])
    for name in world.names[2:]:
        world.plain(f"vip-{name}", node=name, priority=HIGH)
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert world.actions.evicted == []


async def test_plain_pods_are_victims_when_they_are_the_cheapest() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    for rack in ("b0-r0", "b0-r1", "b1-r0", "b1-r1"):
        block, r = rack.split("-")
        world.plain(f"plain-{rack}", node=f"{block}-{r}-n0", priority=5 if rack == "b1-r0" else 0)
    world.group("high", 2, rack=True, priority=HIGH)
    world.filter("high0")
    await settle()
    # One plain pod frees a whole rack; the lowest priority goes first (b1-r0's pod is priority 5).
    assert world.actions.evicted == ["plain-b0-r0"]
    assert world.claim is not None and world.claim.domain == "b0/b0-r0"
    world.check()


async def test_no_preemption_when_it_is_off_or_the_preemptor_says_never() -> None:
    for preemption, never in ((False, False), (True, True)):
        world = QueueWorld(preemption=preemption, claim_after_seconds=3600, claim_on_priority=False)
        low_gang_fills_rack_and_plain_pods_the_rest(world)
        world.group("high", 2, rack=True, priority=HIGH, never=never)
        assert world.filter("high0").passing == []
        await settle()
        assert world.actions.evicted == [], (preemption, never)
        assert world.coordinator.preempt(typed(world.pods["high0"])[0],
                                         proposals(world, ["low0", "plain-b0-r1-n0"])) == {}


async def test_a_gang_that_cannot_fit_even_with_every_victim_gone_evicts_nothing() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.group("huge", 3, rack=True, priority=HIGH)  # 3 x 8 GPUs: no rack of 2 nodes holds it
    assert world.filter("huge0").passing == []
    proposed = proposals(world, ["low0", "plain-b0-r1-n0"])
    assert world.coordinator.preempt(typed(world.pods["huge0"])[0], proposed) == {}
    await settle()
    assert world.actions.evicted == []
    assert world.sample("quorum_preemptions_refused_total") == 1


async def test_kube_schedulers_proposals_are_kept_only_where_quorums_plan_evicts() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.group("high", 2, rack=True, priority=HIGH)
    # No filter call ever reached Quorum (no node passed kube-scheduler's own filters): /preempt
    # is where the gang is first seen, and where the whole-gang preemption starts.
    proposed = proposals(world, ["low0", "plain-b0-r1-n0"])
    # The plan is made; its victim gang's evictions are asked first (dry runs), and kube-scheduler
    # deletes what /preempt lets through without asking budgets: nothing yet.
    assert world.coordinator.preempt(typed(world.pods["high0"])[0], proposed) == {}
    await settle()
    kept = world.coordinator.preempt(typed(world.pods["high0"])[0], proposed)
    assert kept == {"b0-r0-n0": proposed["b0-r0-n0"]}
    assert sorted(world.actions.evicted) == ["low0", "low1"]  # the whole gang, not just low0
    world.check()


async def test_a_preemption_refused_while_the_gang_is_incomplete_starts_once_it_is() -> None:
    """kube-scheduler may ask to preempt for the last member before Quorum's watch has delivered
    the others: refused then. Its members failed kube-scheduler's own filters on every node, and
    such a pod is retried only when something frees room (a pod update, the nudge, does not wake
    it): the gang's completion must start Quorum's own preemption, whose evictions wake it."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    podgroup = make_podgroup("high", 2, topology_key=RACK_KEY, priority=HIGH)
    world.cache.upsert_podgroup(podgroup)
    world.add(gang_pod("high0", podgroup="high", gpus=8))
    assert world.coordinator.preempt(typed(world.pods["high0"])[0], proposals(world, ["low0"])) == {}
    await settle()
    assert world.actions.evicted == []
    world.add(gang_pod("high1", podgroup="high", gpus=8))  # the rest of the gang arrives
    await asyncio.sleep(RECHECK_DELAY_SECONDS + 0.05)
    await settle()
    assert sorted(world.actions.evicted) == sorted(low), "no preemption started without a /preempt"
    assert "Preempting" in world.actions.event_reasons("high")
    world.check()


async def test_a_preemption_asked_for_a_member_the_watch_has_not_delivered_starts_when_it_is() -> None:
    """The preemptor itself is not in Quorum's cache yet (the rest of its gang is): the gang counts
    as complete, but there is no plan for members Quorum cannot see. Its arrival plans again."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    podgroup = make_podgroup("high", 2, topology_key=RACK_KEY, priority=HIGH)
    world.cache.upsert_podgroup(podgroup)
    world.add(gang_pod("high1", podgroup="high", gpus=8))
    late = gang_pod("high0", podgroup="high", gpus=8)
    assert world.coordinator.preempt(typed(late)[0], proposals(world, ["low0"])) == {}
    await settle()
    assert world.actions.evicted == []
    world.add(late)
    await asyncio.sleep(RECHECK_DELAY_SECONDS + 0.05)
    await settle()
    assert sorted(world.actions.evicted) == sorted(low)
    world.check()


async def test_a_search_made_before_the_watch_delivered_the_victims_is_made_again_when_it_does() -> None:
    """kube-scheduler proposes gang low's pods, which Quorum's watch has not delivered: its search
    finds no victim (an empty rack, by its cache), and a search is not repeated within
    ``PLAN_INTERVAL_SECONDS``, except after the cache changed, as here when the victims arrive."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    for name in world.names[2:]:
        world.plain(f"plain-{name}", node=name)
    world.group("high", 2, rack=True, priority=HIGH)
    seen_by_scheduler = {"b0-r0-n0": {"Pods": [{"UID": "uid-low0"}], "NumPDBViolations": 0}}
    assert world.coordinator.preempt(typed(world.pods["high0"])[0], seen_by_scheduler) == {}
    await settle()
    assert world.actions.evicted == []
    low = world.group("low", 2, rack=True, priority=10, nodes=["b0-r0-n0", "b0-r0-n1"])
    await asyncio.sleep(RECHECK_DELAY_SECONDS + 0.05)
    await settle()
    assert sorted(world.actions.evicted) == sorted(low)
    world.check()


async def test_one_displacement_at_a_time_until_its_victims_are_gone() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.group("high", 2, rack=True, priority=HIGH)
    world.filter("high0")
    await settle()
    assert len(world.actions.evicted) == 2
    world.clock.now += 30
    world.filter("high0")  # victims still terminating: no second plan
    await settle()
    assert len(world.actions.evicted) == 2
    world.check()


# ------------------------------------------------------------------ the pure search
def _node(name: str, rack: str, free: int) -> ClaimNode:
    return ClaimNode(name, (rack.split("-")[0], rack, name), {GPU: 8}, 110, {GPU: free}, 100)


def _unit(key: str, priority: int, *nodes: str, gpus: int = 8) -> Unit:
    return Unit(key, priority, tuple((f"{key}-{n}", n, {GPU: gpus}) for n in nodes))


def test_choose_victims_prefers_fewer_units_then_lower_priority() -> None:
    nodes = [_node("a1", "b0-r0", 0), _node("a2", "b0-r0", 0),
             _node("b1", "b0-r1", 0), _node("b2", "b0-r1", 0)]
    members = [Member("m0", {GPU: 8}), Member("m1", {GPU: 8})]
    units = [_unit("gang-x", 3, "a1", "a2"), _unit("p1", 1, "b1"), _unit("p2", 1, "b2")]
    plan = choose_victims(nodes, units, members, 3, required_level=1)
    assert plan is not None and [u.key for u in plan.units] == ["gang-x"] and plan.domain == ("b0", "b0-r0")
    # With two gangs of one unit each, the lower priority goes.
    units = [_unit("gang-x", 3, "a1", "a2"), _unit("gang-y", 2, "b1", "b2")]
    plan = choose_victims(nodes, units, members, 3, required_level=1)
    assert plan is not None and [u.key for u in plan.units] == ["gang-y"]


def test_choose_victims_drops_units_the_fit_does_not_need() -> None:
    nodes = [_node("a1", "b0-r0", 0), _node("a2", "b0-r0", 0)]
    one = [Member("m0", {GPU: 8})]
    # Lowest priority first takes the half-node pod on a1 (freeing no whole node), then the pod on
    # a2, which alone is enough: the first is dropped again.
    units = [_unit("half", 0, "a1", gpus=4), _unit("full", 1, "a2")]
    plan = choose_victims(nodes, units, one, 3, required_level=1)
    assert plan is not None and [u.key for u in plan.units] == ["full"]
    # Both are needed when a1 must give back its 4 GPUs too.
    nodes = [_node("a1", "b0-r0", 4), _node("a2", "b0-r0", 0)]
    two = [Member("m0", {GPU: 8}), Member("m1", {GPU: 8})]
    plan = choose_victims(nodes, units, two, 3, required_level=1)
    assert plan is not None and sorted(u.key for u in plan.units) == ["full", "half"]


def test_choose_victims_takes_the_lowest_priority_inside_a_domain() -> None:
    nodes = [_node("a1", "b0-r0", 0), _node("a2", "b0-r0", 0)]
    units = [_unit("important", 5, "a1"), _unit("batch", 0, "a2")]
    plan = choose_victims(nodes, units, [Member("m0", {GPU: 8})], 3, required_level=1)
    assert plan is not None and [u.key for u in plan.units] == ["batch"]


def test_choose_victims_finds_nothing_when_no_domain_could_hold_the_gang() -> None:
    nodes = [_node("a1", "b0-r0", 0), _node("a2", "b0-r0", 0)]
    members = [Member(f"m{i}", {GPU: 8}) for i in range(3)]
    assert choose_victims(nodes, [_unit("g", 0, "a1", "a2")], members, 3, required_level=1) is None
    plan = choose_victims(nodes, [], members[:2], 3, required_level=1)
    assert plan is None  # nothing to evict and no room


def test_choose_victims_counts_one_member_per_node_when_members_repel() -> None:
    """Two 4-GPU members fit on a1 once its pod goes, packed; apart they need a2 freed as well."""
    nodes = [_node("a1", "b0-r0", 0), _node("a2", "b0-r0", 0)]
    members = [Member("m0", {GPU: 4}), Member("m1", {GPU: 4})]
    units = [_unit("p1", 0, "a1"), _unit("p2", 1, "a2")]
    packed = choose_victims(nodes, units, members, 3, required_level=1)
    assert packed is not None and [u.key for u in packed.units] == ["p1"]
    apart = choose_victims(nodes, units, members, 3, required_level=1, per_node=1)
    assert apart is not None and sorted(u.key for u in apart.units) == ["p1", "p2"]
    assert choose_victims(nodes[:1], units, members, 3, required_level=1, per_node=1) is None


async def test_a_basic_groups_pod_evicted_alone_leaves_the_group_no_longer_bound() -> None:
    """Found by the core machine at 10,000 examples: a pod of a group that is no gang (there, a
    JobSet that asks for none) was the cheapest victim; marked evicting it no longer ran, and the
    group still said Bound with none of its pods running."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    world.cache.upsert_podgroup(make_podgroup("side", 1))
    world.add(gang_pod("side0", podgroup="side", gpus=8))
    await schedule(world, ["side0"])
    world.cache.upsert_podgroup(make_podgroup("side", None))  # its group turns basic: no gang now
    assert world.coordinator.phase_of("ml/side") == "Bound"
    taken = world.pods["side0"]["spec"]["nodeName"]
    for name in world.names:
        if name != taken:
            world.plain(f"plain-{name}", node=name, priority=5)
    world.group("high", 1, priority=HIGH)
    world.filter("high0")
    await settle()
    assert world.actions.evicted == ["side0"]
    assert world.coordinator.phase_of("ml/side") != "Bound"
    world.check()


async def test_a_victim_gang_filed_under_its_podgroup_name_is_evicted_whole() -> None:
    """Found by the core machine at 10,000 examples: a Job's pods name the PodGroup the Job
    controller has not written yet and carry Quorum's annotations for gang ``a1``; the cache files
    them under the PodGroup's key (``ml/j0``) with the annotations' declaration (``ml/a1``). The
    displacement took the declaration's key for the victim: its requeue found no member to evict,
    while its plan let kube-scheduler's /preempt take the members one by one."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    for i, node in enumerate(("b0-r0-n0", "b0-r0-n1")):
        obj = gang_pod(f"x{i}", gang="a1", min_count=2, gpus=8, node_name=node)
        obj["spec"]["schedulingGroup"] = {"podGroupName": "j0"}
        world.add(obj)
    for name in world.names[2:]:
        world.plain(f"plain-{name}", node=name, priority=5)
    world.group("high", 2, rack=True, priority=HIGH)
    world.filter("high0")
    await settle()
    assert sorted(world.actions.evicted) == ["x0", "x1"]
    world.check()
