"""The gang queue: order by priority then arrival, the head-of-line claim, backfill (``gang/queue.py``)."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any

from extender.config import Config, Preemption, Starvation
from extender.gang.coordinator import Coordinator
from extender.metrics import Metrics
from extender.topology.apart import Apart
from extender.topology.claims import ClaimNode, choose_claim
from extender.topology.placement import Member

from .fixtures import World, gang_pod, make_podgroup, schedule
from .payloads import bound, make_pod
from .test_coordinator_apart import one_per_host

RACK_KEY = "topology.quorum.dev/rack"
GPU = "nvidia.com/gpu"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class QueueWorld(World):
    """2 blocks x 2 racks x 2 nodes of 8 GPUs, a hand-moved clock and the given starvation settings."""

    def __init__(self, preemption: bool = False, honor_disruption_mode: bool = False,
                 **starvation: Any) -> None:
        self.clock = Clock()
        super().__init__(clock=self.clock)
        self.cache.listeners.clear()
        config = replace(Config(), starvation=Starvation(**starvation),
                         preemption=Preemption(enabled=preemption,
                                               honor_disruption_mode=honor_disruption_mode))
        self.metrics = Metrics()
        self.coordinator = Coordinator(config, self.cache, self.actions, self.metrics, clock=self.clock,
                                       strict=True)
        self.metrics.track_state(self.coordinator.phase_counts, self.cache.counts,
                                 self.coordinator.reserved_count, self.coordinator.queue_counts)

    def plain(self, name: str, node: str | None = None, gpus: int = 8, priority: int = 0) -> str:
        obj = make_pod(name, f"uid-{name}", gpus=gpus, cpu="1", memory="1Gi", node=node,
                       phase="Running" if node else "Pending")
        obj["spec"]["priority"] = priority
        self.add(obj)
        return name

    def group(self, name: str, size: int, rack: bool = False, priority: int = 0, gpus: int = 8,
              nodes: list[str] | None = None, never: bool = False, mode: str | None = None,
              group_policy: str | None = None) -> list[str]:
        """A PodGroup gang of ``size`` pods, pending or (``nodes``) running there; ``mode`` its
        ``disruptionMode`` ("single" / "all"), ``group_policy`` its own ``preemptionPolicy``."""
        obj = make_podgroup(name, size, topology_key=RACK_KEY if rack else None, priority=priority)
        if mode is not None:
            obj["spec"]["disruptionMode"] = {mode: {}}
        if group_policy is not None:
            obj["spec"]["preemptionPolicy"] = group_policy
        self.cache.upsert_podgroup(obj)
        names = [f"{name}{i}" for i in range(size)]
        for i, pod_name in enumerate(names):
            member = gang_pod(pod_name, podgroup=name, gpus=gpus, node_name=nodes[i] if nodes else "")
            if never:
                member["spec"]["preemptionPolicy"] = "Never"
            self.add(member)
        return names

    def finish(self, name: str) -> None:
        obj = bound(self.pods[name], self.pods[name]["spec"]["nodeName"], phase="Succeeded")
        self.pods[name] = obj
        self.cache.upsert_pod(obj)

    @property
    def claim(self) -> Any:
        return self.coordinator.queue.claim

    def check(self) -> None:
        assert self.coordinator.check_invariants() == []


def one_node_busy_per_rack(world: QueueWorld) -> None:
    """Every rack has one of its two nodes taken: a gang of 2 x 8 GPUs in one rack fits nowhere."""
    for rack in ("b0-r0", "b0-r1", "b1-r0", "b1-r1"):
        block = rack.split("-")[0]
        world.plain(f"busy-{rack}", node=f"{block}-{rack.split('-')[1]}-n0")


def claimed_at_once() -> tuple[QueueWorld, list[str]]:
    """No rack has room for gang ml/big (2 x 8 GPUs in one rack), which claims at once."""
    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    big = world.group("big", 2, rack=True)
    world.filter("big0")
    assert world.claim is not None
    return world, big


# ------------------------------------------------------------------ order
async def test_waiting_gangs_are_ordered_by_priority_then_arrival() -> None:
    world = QueueWorld(enabled=False)
    for name in world.names:
        world.plain(f"full-{name}", node=name)  # nothing fits: every gang waits
    world.group("early", 1)
    assert world.filter("early0").passing == []
    world.clock.now += 5
    world.group("late", 1)
    assert world.filter("late0").passing == []
    world.clock.now += 5
    world.group("urgent", 1, priority=100)
    assert world.filter("urgent0").passing == []
    assert world.coordinator.queue.order() == ["ml/urgent", "ml/early", "ml/late"]
    views = {g["gang"]: g for g in world.coordinator.snapshot()}
    assert [views[k]["queuePosition"] for k in ("ml/urgent", "ml/early", "ml/late")] == [1, 2, 3]
    assert views["ml/early"]["waitingSeconds"] == 10.0
    assert views["ml/urgent"]["priority"] == 100
    assert world.sample("quorum_queue", what="waiting") == 3


async def test_a_gang_without_a_podgroup_priority_takes_its_pods_highest() -> None:
    world = QueueWorld(enabled=False)
    world.plain("p", gpus=1, priority=7)  # not in a gang: no effect on any gang
    for i in range(2):
        obj = gang_pod(f"a{i}", gang="a", min_count=2)
        obj["spec"]["priority"] = 5 * i
        world.add(obj)
    assert world.coordinator.queue.priority_of("ml/a") == 5


# ------------------------------------------------------------------ the claim
async def test_the_head_gang_claims_the_rack_missing_least_after_the_claim_delay() -> None:
    world = QueueWorld(claim_after_seconds=60, claim_on_priority=False)
    one_node_busy_per_rack(world)
    world.plain("busy-b1-r1-n1", node="b1-r1-n1")  # rack b1-r1 is full: it misses more
    big = world.group("big", 2, rack=True)
    assert world.filter("big0").passing == []
    assert world.claim is None, "no claim before the delay"
    world.clock.now += 61
    world.filter("big0")
    claim = world.claim
    assert claim is not None and claim.gang == "ml/big" and claim.level == "rack"
    assert claim.domain == "b0/b0-r0" and claim.missing == 1 and claim.nodes == {"b0-r0-n0", "b0-r0-n1"}
    assert "Claimed" in world.actions.event_reasons("big")
    assert world.sample("quorum_claims_total", event="made") == 1
    assert world.sample("quorum_queue", what="claimed_nodes") == 2
    world.check()
    # The head gang's own members are nudged (it may fit in the claim already).
    await asyncio.sleep(0)
    assert set(big) & set(world.actions.requeued)


async def test_lower_ordered_work_keeps_off_the_claim_and_backfills_elsewhere() -> None:
    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    world.group("big", 2, rack=True)
    assert world.filter("big0").passing == []
    assert world.claim is not None
    claimed = world.claim.nodes
    # A small gang of the same priority fits, but only outside the claim.
    small = world.group("small", 1)
    placed = await schedule(world, small)
    assert placed["small0"] not in claimed
    world.check()
    # Plain pods of lower or equal priority are kept off the claimed nodes, with the reason.
    world.plain("web", gpus=8)
    decision = world.filter("web")
    assert not set(decision.passing) & claimed
    reason = decision.unresolvable[sorted(claimed)[0]]
    assert reason.startswith("capacity earmarked for gang ml/big (priority 0, waiting ")
    # A plain pod that ranks above the claim's gang is not.
    world.plain("urgent", gpus=8, priority=10)
    assert claimed <= set(world.filter("urgent").passing)


async def test_a_gang_that_fits_only_in_the_claim_is_told_why() -> None:
    world, _ = claimed_at_once()
    for name in ("b0-r1-n1", "b1-r0-n1", "b1-r1-n1"):  # everything outside the claim is taken
        world.plain(f"more-{name}", node=name)
    world.group("small", 1)
    assert world.filter("small0").passing == []
    reason = world.coordinator.reason_of("ml/small")
    assert "capacity earmarked for gang ml/big" in reason, reason
    views = {g["gang"]: g for g in world.coordinator.snapshot()}
    assert views["ml/small"]["blockedBy"] == "ml/big"
    assert views["ml/big"]["claim"]["domain"] == "b0/b0-r0"
    assert world.coordinator.debug_document()["claim"]["gang"] == "ml/big"


async def test_a_partly_bound_gang_is_repaired_outside_the_claim() -> None:
    """A gang another scheduler bound in part (one member inside the claimed rack) is completed
    when the next gang is placed; its missing member, of a lower-ordered gang, keeps off the claim
    like any backfill (found by the stateful test: the repair reserved inside the claim)."""
    world, _ = claimed_at_once()
    claimed = world.claim.nodes
    group = make_podgroup("part", 2)
    group["spec"]["priority"] = 0  # the claim's own: it ranks below the head gang
    world.cache.upsert_podgroup(group)
    world.add(gang_pod("part0", podgroup="part", gpus=4, node_name="b0-r0-n1"))  # bound by someone else
    world.add(gang_pod("part1", podgroup="part", gpus=4))
    world.filter("big0")  # any placement repairs partly bound gangs first
    reservation = world.coordinator.reservation_of("ml/part")
    assert set(reservation) == {"uid-part1"}, reservation
    assert reservation["uid-part1"] not in claimed
    world.check()


async def test_a_podgroup_that_ran_as_a_gang_then_turned_basic_keeps_off_the_claim() -> None:
    """Its pods are plain pods now: they keep off the claim like any of their priority, though the
    group once ran as a gang (found by the stateful test: 'g1-8 was offered capacity earmarked')."""
    world, _ = claimed_at_once()
    claimed = world.claim.nodes
    world.group("was", 1, gpus=1)
    await schedule(world, ["was0"])  # it runs as a gang of one
    world.cache.upsert_podgroup(make_podgroup("was", None))
    world.add(gang_pod("was1", podgroup="was", gpus=1))
    passing = world.filter("was1").passing
    assert passing and not set(passing) & claimed, passing
    world.check()


async def test_the_claim_fills_as_its_pods_finish_then_goes_with_the_reservation() -> None:
    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    big = world.group("big", 2, rack=True)
    world.filter("big0")
    assert world.claim is not None and world.claim.domain == "b0/b0-r0"
    world.finish("busy-b0-r0")  # the pod in the claimed rack ends
    await asyncio.sleep(0)
    placed = await schedule(world, big)
    assert {world.rack_of(n) for n in placed.values()} == {"b0-r0"}
    await asyncio.sleep(0)
    assert world.claim is None, "released once its gang reserved"
    assert world.sample("quorum_claims_total", event="released") == 1
    world.check()


async def test_priority_alone_claims_at_once_and_the_higher_gang_binds_first() -> None:
    world = QueueWorld(claim_after_seconds=3600, claim_on_priority=True)
    one_node_busy_per_rack(world)
    world.group("low", 2, rack=True)
    assert world.filter("low0").passing == []
    assert world.claim is None, "equal priorities wait for the delay"
    high = world.group("high", 2, rack=True, priority=100)
    assert world.filter("high0").passing == []
    assert world.claim is not None and world.claim.gang == "ml/high"
    # Capacity frees in the claimed rack: the low gang, tried first, may not take it.
    world.finish(f"busy-{world.claim.domain.split('/')[1]}")
    await asyncio.sleep(0)
    assert world.filter("low0").passing == []
    placed = await schedule(world, high)
    assert len(placed) == 2
    world.check()


async def test_a_head_gang_of_higher_priority_arriving_takes_the_claim_over() -> None:
    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    world.group("first", 2, rack=True)
    world.filter("first0")
    assert world.claim is not None and world.claim.gang == "ml/first"
    world.group("vip", 2, rack=True, priority=50)
    world.filter("vip0")
    await asyncio.sleep(0)
    assert world.claim is not None and world.claim.gang == "ml/vip"
    world.check()


async def test_no_claim_when_starvation_protection_is_off() -> None:
    world = QueueWorld(enabled=False)
    one_node_busy_per_rack(world)
    world.group("big", 2, rack=True, priority=100)
    world.clock.now += 3600
    assert world.filter("big0").passing == []
    assert world.claim is None
    assert world.sample("quorum_queue", what="claims") == 0


async def test_a_gang_no_domain_could_hold_claims_nothing_and_the_next_one_does() -> None:
    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    world.group("huge", 3, rack=True, priority=10)  # 3 x 8 GPUs: no rack of 2 nodes ever holds it
    assert world.filter("huge0").passing == []
    assert world.claim is None
    world.group("big", 2, rack=True)
    world.filter("big0")
    assert world.claim is not None and world.claim.gang == "ml/big"
    world.check()


async def test_the_claim_goes_when_its_gang_is_deleted() -> None:
    world, big = claimed_at_once()
    for name in big:
        world.cache.delete_pod(world.pods.pop(name))
    world.cache.delete_podgroup(make_podgroup("big", 2))
    await asyncio.sleep(0)
    world.plain("web", gpus=8)
    world.filter("web")
    assert world.claim is None
    world.check()


async def test_the_claim_goes_the_moment_its_gang_stops_waiting() -> None:
    world, big = claimed_at_once()
    world.cache.delete_pod(world.pods.pop(big[1]))  # below its quorum: WaitingForMembers
    assert world.coordinator.phase_of("ml/big") == "WaitingForMembers"
    assert world.claim is None, "released within the same cache event, not at some later refresh"
    world.check()


async def test_a_claim_left_unused_while_its_domain_has_room_is_given_up() -> None:
    world, _ = claimed_at_once()
    world.finish(f"busy-{world.claim.domain.split('/')[1]}")  # room for it; kube-scheduler never comes
    world.plain("web", gpus=1)
    assert world.filter("web").passing and world.claim is not None
    world.clock.now += 61
    world.coordinator.queue.tick()  # the queue's timer, armed for when the claim's time is up
    assert world.claim is None
    assert "ClaimUnused" in world.actions.event_reasons("big")
    world.clock.now += 10
    world.filter("big0")
    assert world.claim is None, "no new claim right after giving one up"
    world.check()


async def test_a_plain_pods_filter_writes_nothing_even_with_a_claim_and_preemption_due() -> None:
    """A plain pod's filter is a read: the claim's upkeep (a displacement due again, an unused
    claim's time up) waits for the queue's timer, a gang's filter or a cache event."""
    world = QueueWorld(preemption=True, claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    world.group("big", 2, rack=True, priority=10)  # outranks the busy pods: it may displace them
    world.filter("big0")
    for _ in range(5):
        await asyncio.sleep(0)
    assert world.claim is not None and world.actions.evicted
    world.plain("web", gpus=1)
    world.clock.now += 3600  # every grace, pause and delay over: the upkeep has work to do
    before = copy.deepcopy(vars(world.actions))
    decision = world.filter("web")
    for _ in range(5):
        await asyncio.sleep(0)
    assert vars(world.actions) == before, "a plain pod's filter made an API call"
    assert not set(decision.passing) & world.claim.nodes


# ------------------------------------------------------------------ starvation, simulated
async def _stream_of_small_gangs(world: QueueWorld, rounds: int) -> int | None:
    """A big gang (a whole block) waits while small gangs keep arriving, each tried before it, and
    finishing three rounds later. Block b1 stays busy throughout; block b0 starts full and drains
    one node per round. The round the big gang fits, or None."""
    for i in range(4):
        world.plain(f"busy{i}", node=f"b0-r{i // 2}-n{i % 2}", gpus=8)
        world.plain(f"forever{i}", node=f"b1-r{i // 2}-n{i % 2}", gpus=8)
    world.group("big", 4)  # 4 x 8 GPUs: a whole block
    running: list[tuple[int, str]] = [(-3 + i, f"busy{i}") for i in range(4)]
    for round_ in range(rounds):
        world.clock.now += 10
        while running and running[0][0] <= round_ - 3:
            world.finish(running.pop(0)[1])
        small = world.group(f"s{round_}-", 1)
        await asyncio.sleep(0)
        if world.filter(small[0]).passing:
            await schedule(world, small)
            running.append((round_, small[0]))
        if world.filter("big0").passing:
            return round_
        world.check()
    return None


async def test_without_the_claim_a_big_gang_starves_behind_small_ones() -> None:
    world = QueueWorld(enabled=False)
    assert await _stream_of_small_gangs(world, rounds=30) is None


async def test_with_the_claim_the_big_gang_binds_once_the_domain_drains() -> None:
    world = QueueWorld(claim_after_seconds=20, claim_on_priority=False)
    bound_round = await _stream_of_small_gangs(world, rounds=30)
    assert bound_round is not None and bound_round <= 6, bound_round


# ------------------------------------------------------------------ the pure choice
def _node(name: str, rack: str, free_gpus: int, alloc: int = 8) -> ClaimNode:
    block = rack.split("-")[0]
    return ClaimNode(name, (block, rack, name), {GPU: alloc}, 110, {GPU: free_gpus}, 100)


def test_choose_claim_picks_the_required_domain_missing_least() -> None:
    nodes = [_node("a1", "b0-r0", 0), _node("a2", "b0-r0", 0),
             _node("b1", "b0-r1", 8), _node("b2", "b0-r1", 0)]
    members = [Member(f"m{i}", {GPU: 8}) for i in range(2)]
    choice = choose_claim(nodes, members, 3, required_level=1)
    assert choice is not None and choice.domain == ("b0", "b0-r1") and choice.missing == 1
    assert choice.nodes == ("b1", "b2")


def test_choose_claim_without_a_level_uses_the_lowest_level_that_could_hold_it() -> None:
    nodes = [_node("a1", "b0-r0", 0), _node("b1", "b0-r1", 0), _node("c1", "b1-r0", 0, alloc=4)]
    members = [Member(f"m{i}", {GPU: 8}) for i in range(2)]
    choice = choose_claim(nodes, members, 3, required_level=None)
    # No single host or rack holds 2 x 8 GPUs; block b0 does (b1's node is too small for one member).
    assert choice is not None and choice.level == 0 and choice.domain == ("b0",)
    assert choose_claim(nodes, [Member(f"m{i}", {GPU: 8}) for i in range(3)], 3, None) is None


def test_choose_claim_sizes_a_mixed_gang_by_its_largest_requests() -> None:
    nodes = [_node("a1", "b0-r0", 8), _node("a2", "b0-r0", 4)]
    members = [Member("small", {GPU: 4}), Member("large", {GPU: 8})]
    choice = choose_claim(nodes, members, 3, required_level=1)
    assert choice is not None and choice.missing == 1  # the envelope (8 GPUs) fits once in the free capacity


def test_choose_claim_counts_one_member_per_node_for_a_gang_whose_members_repel() -> None:
    """Two 16-GPU nodes hold four 4-GPU members packed, but only two if they must not share a node."""
    nodes = [ClaimNode(n, ("b0", "b0-r0", n), {GPU: 16}, 110, {GPU: 16}, 100) for n in ("a1", "a2")]
    nodes += [ClaimNode(n, ("b0", "b0-r1", n), {GPU: 4}, 110, {GPU: 0}, 100) for n in ("c1", "c2", "c3", "c4")
              ]
    members = [Member(f"m{i}", {GPU: 4}) for i in range(4)]
    packed = choose_claim(nodes, members, 3, required_level=1)
    assert packed is not None and packed.domain == ("b0", "b0-r0") and packed.missing == 0
    apart = choose_claim(nodes, members, 3, required_level=1, apart=Apart(None))
    # Rack r0 could never hold four members apart; r1's four nodes could, once they free up.
    assert apart is not None and apart.domain == ("b0", "b0-r1") and apart.missing == 4
    held = choose_claim(nodes, members, 3, required_level=1, apart=Apart(None, taken=frozenset({("c1",)})))
    assert held is None  # a running member holds c1: three nodes left for four members


async def test_a_gang_whose_members_repel_claims_room_for_one_member_per_node() -> None:
    """Each rack has one free node: enough for the two 4-GPU members packed, one short apart. The
    claim must say one member's room is still in use, not that the gang fits already."""
    world = QueueWorld(claim_after_seconds=0, claim_on_priority=False)
    one_node_busy_per_rack(world)
    names = world.group("apart", 2, rack=True, gpus=4)
    for name in names:
        world.cache.upsert_pod(one_per_host(world.pods[name]))
    assert world.filter("apart0").passing == []
    assert world.claim is not None and world.claim.gang == "ml/apart"
    assert world.claim.missing == 1, world.claim
    world.check()
    # Room for both members packed on the free node is no room for them apart: the claim is kept,
    # not given up as unused after a minute.
    for _ in range(3):
        world.clock.now += 61
        world.coordinator.queue.tick()
    assert world.claim is not None and world.claim.gang == "ml/apart"
    assert "ClaimUnused" not in world.actions.event_reasons("apart")


async def test_a_gang_whose_members_repel_preempts_enough_nodes_for_one_member_each() -> None:
    """Every node is full of low-priority pods. Packed, the two 4-GPU members need one node freed;
    apart, two: the displacement must evict two pods of one rack, not one."""
    world = QueueWorld(preemption=True, claim_after_seconds=0, claim_on_priority=True)
    for name in world.names:
        world.plain(f"low-{name}", node=name)
    names = world.group("urgent", 2, rack=True, priority=100, gpus=4)
    for name in names:
        world.cache.upsert_pod(one_per_host(world.pods[name]))
    assert world.filter("urgent0").passing == []
    await asyncio.sleep(0.05)
    evicted = sorted(world.actions.evicted)
    assert len(evicted) == 2, evicted
    assert len({world.rack_of(name.removeprefix("low-")) for name in evicted}) == 1, evicted
