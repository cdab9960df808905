"""DRA devices: gangs whose members ask for devices through ResourceClaims (resource.k8s.io/v1).

Each test publishes its own devices: a DeviceClass selecting a driver of its own and ResourceSlices
on the kwok nodes it picks (``dra.py``), so devices exist only there and only for its pods. The pods
ask no extended GPUs (``gpus=0``) except in the mixed test, so the nodes' extended GPUs and the
suite's idle check are untouched.

Without Quorum's device accounting, kube-scheduler's DynamicResources plugin allocates devices pod by
pod: a gang that does not fit would get some members' claims allocated and held (a failed bind keeps
a claim allocated until PostFilter releases it), members asking a whole node could share one, and
topology would be ignored. Every test runs under the suite's partial-gang watcher and asserts on
pods and claims read back from the apiserver.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence

import pytest

from .dra import DEVICES_PER_NODE, ClaimMonitor, DraDevices, is_allocated, names
from .scenario import Scenario
from .test_reservations import wait_held

pytestmark = pytest.mark.e2e

UNFIT_WATCH_SECONDS = 20.0  # how long a gang that does not fit is watched
MAX_HELD_SECONDS = 15.0  # longest a claim may stay allocated for a pod that is not bound (one attempt)


@pytest.fixture
def claim_monitor(scenario: Scenario) -> Iterator[ClaimMonitor]:
    monitor = ClaimMonitor(scenario.kube.fork(), scenario.ns).start()
    try:
        yield monitor
    finally:
        monitor.stop()


def pick_nodes(sc: Scenario, count: int) -> list[str]:
    """``count`` topology nodes, rack by rack in order; skips the test when there are fewer."""
    ordered = [node for rack in sc.topo.racks.values() for node in rack]
    if len(ordered) < count:
        pytest.skip(f"needs {count} GPU nodes for DRA devices, the topology has {len(ordered)}")
    return ordered[:count]


def device_reasons(sc: Scenario, dra: DraDevices, pods: Sequence[str]) -> list[str]:
    """FailedScheduling messages of ``pods`` that name the test's device class and "devices"."""
    wanted = set(pods)
    out = []
    for event in sc.kube.events(sc.ns):
        if event.get("reason") != "FailedScheduling" or \
                (event.get("involvedObject") or {}).get("name") not in wanted:
            continue
        message = str(event.get("message") or event.get("note") or "")
        if dra.device_class in message and "devices" in message:
            out.append(message)
    return out


# ------------------------------------------------------------------------------ (a)
def test_dra_gang_binds_whole_one_member_per_device_node(scenario: Scenario, dra: DraDevices,
                                                         claim_monitor: ClaimMonitor) -> None:
    sc = scenario
    nodes = pick_nodes(sc, 4)
    dra.add_nodes(nodes, DEVICES_PER_NODE)
    members = names(dra.gang("whole", 4, devices=DEVICES_PER_NODE))
    placement = sc.wait_bound(members, timeout=60, what="DRA gang 'whole' (4 x 8 devices) bound")
    per_node = Counter(placement.values())
    assert set(per_node) == set(nodes) and set(per_node.values()) == {1}, (
        f"4 members of 8 devices must take one device node each ({nodes}), got {placement}")
    dra.check_allocations(placement, DEVICES_PER_NODE)
    sc.record("bind_skew", sc.bind_skew(members))
    # Informational: how long claims were allocated before their pod was bound (the bind hold).
    sc.record("claims_held_while_unbound", claim_monitor.report())
    sc.finish()


# ------------------------------------------------------------------------------ (b)
def test_dra_gang_that_does_not_fit_binds_nothing_and_holds_no_claim(scenario: Scenario, dra: DraDevices,
                                                                     claim_monitor: ClaimMonitor) -> None:
    sc = scenario
    nodes = pick_nodes(sc, 4)
    dra.add_nodes(nodes, DEVICES_PER_NODE)
    size = len(nodes) + 1
    members = names(dra.gang("toobig", size, devices=DEVICES_PER_NODE))
    dra.wait_claims(members)  # the claims exist, so the monitor below watches something real
    # Each member fits on any device node on its own (kube-scheduler's DRA filter passes them all);
    # the gang as a whole does not.
    sc.assert_unbound_for(members, UNFIT_WATCH_SECONDS,
                          what=f"members of gang 'toobig' ({size} x 8 devices, {len(nodes)} device nodes)")
    report = claim_monitor.report()
    sc.record("claims_held_while_unbound", report)
    assert claim_monitor.polls >= UNFIT_WATCH_SECONDS / 2 and len(claim_monitor.seen) >= size, (
        f"the claim monitor did not watch the gang's claims: {report}")
    assert report["longest_seconds"] <= MAX_HELD_SECONDS, (
        f"a claim of gang 'toobig' stayed allocated for {report['longest_seconds']}s while its pod was not "
        f"bound (more than {MAX_HELD_SECONDS:g}s, one scheduling attempt): {report}\n{sc.diag()}")

    messages = sc.wait_for(f"a FailedScheduling reason naming {dra.device_class} and 'devices'",
                           lambda: device_reasons(sc, dra, members), timeout=15)
    debug = sc.gang_debug("toobig") or {}
    sc.record("reason", {"event": messages[-1][:300], "debug_phase": debug.get("phase"),
                         "debug_reason": str(debug.get("reason"))[:300]})
    sc.finish()


# ------------------------------------------------------------------------------ (c)
def test_dra_fragmented_devices_small_gang_binds_on_whole_nodes_large_waits(scenario: Scenario,
                                                                            dra: DraDevices) -> None:
    sc = scenario
    nodes = pick_nodes(sc, 4)
    dra.add_nodes(nodes, DEVICES_PER_NODE)
    halves, wholes = nodes[:2], nodes[2:]
    half = DEVICES_PER_NODE // 2
    holders = sc.create([dra.pinned(f"holder-{i}", node, devices=half) for i, node in enumerate(halves)])
    held = sc.wait_bound(holders, timeout=60, what="plain pods holding half of two device nodes")
    assert held == dict(zip(holders, halves, strict=True)), f"holders must be on {halves}: {held}"
    dra.wait_allocated(holders)
    dra.check_allocations(held, half)
    dra.template(DEVICES_PER_NODE)  # made now, so that the two gangs below are created back to back

    # 24 devices are free but only two nodes are whole: 3 x 8 cannot fit, 2 x 8 can. Both gangs have
    # the same priority, so the large one (first in the queue) would earmark a domain only after
    # starvation.claimAfterSeconds (60 s, the default; quorum-e2e.yaml does not change it). The small
    # gang is created right after it and the test ends well within that, so no claim is involved:
    # this checks that the small gang is placed on the whole nodes, not what a claim would do (the
    # small gang's wait below is bounded by 30 s, before any claim could exist).
    large = names(dra.gang("large", 3, devices=DEVICES_PER_NODE))
    created = time.monotonic()
    small = names(dra.gang("small", 2, devices=DEVICES_PER_NODE))
    placed = sc.wait_bound(small, timeout=30, what="gang 'small' (2 x 8 devices) bound on the whole nodes")
    sc.record("small_bound_after_seconds", round(time.monotonic() - created, 2))
    assert sorted(placed.values()) == sorted(wholes), f"gang 'small' must take {wholes}, got {placed}"
    bound = {n: node for n, node in sc.placement(large).items() if node}
    assert not bound, f"gang 'large' must bind nothing: {bound}"
    sc.assert_unbound_for(large, 8, what="members of gang 'large' (3 x 8 devices, no third whole node)")
    dra.check_allocations(placed, DEVICES_PER_NODE)
    reasons = device_reasons(sc, dra, large)
    sc.record("large_reason", (reasons or [""])[-1][:300])
    sc.finish()


# ------------------------------------------------------------------------------ (d)
def test_dra_members_with_fewer_devices_share_a_node(scenario: Scenario, dra: DraDevices) -> None:
    sc = scenario
    nodes = pick_nodes(sc, 2)
    dra.add_nodes(nodes, DEVICES_PER_NODE)
    half = DEVICES_PER_NODE // 2
    members = names(dra.gang("halves", 4, devices=half))
    placement = sc.wait_bound(members, timeout=60, what="DRA gang 'halves' (4 x 4 devices) bound")
    per_node = Counter(placement.values())
    assert per_node == dict.fromkeys(nodes, 2), (
        f"4 members of {half} devices must fill the two device nodes {nodes}, two each: {placement}")
    dra.check_allocations(placement, half)
    sc.record("bind_skew", sc.bind_skew(members))
    sc.finish()


# ------------------------------------------------------------------------------ (e)
def test_dra_gangs_and_extended_gpu_gangs_bind_whole_side_by_side(scenario: Scenario,
                                                                  dra: DraDevices) -> None:
    """Two extended-GPU gangs and two DRA gangs at once on the same nodes: every other rack's GPUs
    are taken, so the extended gangs (required rack) can only use the device rack, whose nodes the
    DRA gangs fill too. Each kind of demand must be counted apart from the other."""
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=2, gpus_per_node=2) or (
        None if len(topo.racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    rack = next(iter(topo.racks))
    device_nodes = topo.racks[rack]
    dra.add_nodes(device_nodes, DEVICES_PER_NODE)
    sc.blockers(sorted(set(topo.nodes) - set(device_nodes)), gpus=topo.gpus_per_node)

    size, per_pod = len(device_nodes), topo.gpus_per_node // 2
    half = DEVICES_PER_NODE // 2
    gangs = {f"ext-{i}": sc.gang(f"ext-{i}", size, gpus=per_pod, required="rack", create=False)
             for i in range(2)}
    gangs.update({f"dra-{i}": dra.gang(f"dra-{i}", size, devices=half, create=False) for i in range(2)})
    interleaved = [m for group in zip(*gangs.values(), strict=True) for m in group]
    sc.create(interleaved)
    every = names(interleaved)
    placement = sc.wait_bound(every, timeout=90, what="two extended-GPU and two DRA gangs bound")

    for gang, manifests in gangs.items():
        where = {n: placement[n] for n in names(manifests)}
        assert set(where.values()) <= set(device_nodes), f"gang {gang} must be in rack {rack}: {where}"
    dra_members = names(gangs["dra-0"] + gangs["dra-1"])
    per_node = Counter(placement[n] for n in dra_members)
    assert per_node == dict.fromkeys(device_nodes, 2), (
        f"{len(dra_members)} DRA members of {half} devices must fill {device_nodes}, two each: {per_node}")
    dra.check_allocations({n: placement[n] for n in dra_members}, half)
    sc.record("bind_skew", {gang: sc.bind_skew(names(m))["watch_first_to_last_seconds"]
                            for gang, m in gangs.items()})
    sc.finish()


# ------------------------------------------------------------------------------ (f)
def test_dra_required_rack_gang_binds_inside_the_rack_with_enough_devices(scenario: Scenario,
                                                                          dra: DraDevices) -> None:
    sc, topo = scenario, scenario.topo
    big = [r for r, nodes in topo.racks.items() if len(nodes) >= 3]
    rack_b = big[0] if big else None
    small = [r for r, nodes in topo.racks.items() if len(nodes) >= 2 and r != rack_b]
    if rack_b is None or not small:
        pytest.skip("needs a rack of >= 3 nodes and another of >= 2")
    rack_a = small[0]
    a_nodes, b_nodes = topo.racks[rack_a][:2], topo.racks[rack_b][:3]
    dra.add_nodes(a_nodes + b_nodes, DEVICES_PER_NODE)

    members = names(dra.gang("racked", 3, devices=DEVICES_PER_NODE, required="rack"))
    placement = sc.wait_bound(members, timeout=60, what="gang 'racked' (3 x 8 devices, required rack) bound")
    used_racks, _ = sc.racks_and_blocks(placement)
    assert used_racks == {rack_b}, f"gang 'racked' must be inside rack {rack_b}: {placement}"
    assert sorted(placement.values()) == sorted(b_nodes), (
        f"gang 'racked' must take one device node each in rack {rack_b} ({b_nodes}): {placement}")
    dra.check_allocations(placement, DEVICES_PER_NODE)
    sc.record("racks", {"devices_in": {rack_a: a_nodes, rack_b: b_nodes}, "bound_in": sorted(used_racks)})
    sc.finish()


# ------------------------------------------------------------------------------ (g)
def test_dra_claims_of_a_released_gang_are_freed_within_one_attempt(scenario: Scenario, dra: DraDevices,
                                                                    claim_monitor: ClaimMonitor) -> None:
    """A gang held at bind has its members' claims allocated (kube-scheduler allocates in PreBind,
    before it asks Quorum to bind). When the reservation goes, those members are refused at bind and
    answered "no node" on their next attempt, so kube-scheduler's PostFilter frees the devices: a
    waiting gang holds no devices. Then the gang binds whole once its last member can be scheduled."""
    sc = scenario
    nodes = pick_nodes(sc, 4)
    dra.add_nodes(nodes, DEVICES_PER_NODE)
    # The last member cannot pass kube-scheduler's own filters: the others wait for it at bind.
    dra.gang("held", 4, devices=DEVICES_PER_NODE, blocked=[3])
    survivors = [f"held-{i}" for i in range(3)]
    wait_held(sc, "held", 3)
    dra.wait_allocated(survivors, timeout=20)
    sc.delete(["held-3"])
    released = time.monotonic()

    def freed() -> bool:
        claims = dra.claims_of(survivors)
        return all(not any(is_allocated(c) for c in claims[p]) for p in survivors)

    sc.wait_for("the released members' claims deallocated", freed, timeout=MAX_HELD_SECONDS)
    sc.record("claims_freed_after_release_seconds", round(time.monotonic() - released, 2))
    sc.assert_unbound_for(survivors, 2, what="members of the released gang")
    sc.record("claims_held_while_unbound", claim_monitor.report())

    sc.create([dra.pod("held-3", devices=DEVICES_PER_NODE, gang="held", min_count=4)])
    placement = sc.wait_bound([*survivors, "held-3"], timeout=60, what="gang 'held' bound once whole")
    assert sorted(placement.values()) == sorted(nodes), f"one member per device node, got {placement}"
    dra.check_allocations(placement, DEVICES_PER_NODE)
    sc.finish()
