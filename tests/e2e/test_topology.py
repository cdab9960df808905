"""Topology: a required rack is honoured (and is a hard constraint), also when gangs queue for it;
a preferred rack packs tightly.

Without Quorum's placement, kube-scheduler's default scoring spreads pods over the emptiest nodes,
so these gangs would land in many racks and blocks.
"""

from __future__ import annotations

import math
import time

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_required_rack_gang_binds_inside_one_rack(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    gpn, rack_gpus = topo.gpus_per_node, topo.rack_gpus
    # One whole node taken in every rack but the last: only that rack can hold a rack-sized gang,
    # while the cluster as a whole keeps enough free GPUs for a second one.
    free_after_first = topo.total_gpus - rack_gpus - (len(racks) - 1) * gpn
    why = topo.shortfall(nodes_per_rack=2) or (None if free_after_first >= rack_gpus and len(racks) >= 2
                                               else "needs >= 2 racks and room for a second rack-sized gang")
    if why:
        pytest.skip(why)
    whole_rack = racks[-1]
    sc.blockers([topo.racks[r][0] for r in racks[:-1]], gpus=gpn)

    per_pod = max(1, gpn // 2)
    size = rack_gpus // per_pod  # default cluster: 8 pods x 4 GPUs = one rack of 4 x 8 GPUs
    first = [m["metadata"]["name"] for m in sc.gang("first", size, gpus=per_pod, required="rack")]
    placement = sc.wait_bound(first, timeout=60, what=f"gang 'first' ({size} pods) bound")
    used_racks, _ = sc.racks_and_blocks(placement)
    assert used_racks == {whole_rack}, f"gang 'first' must fill rack {whole_rack}, got {placement}"

    # The same gang again: no rack has room any more, though {free_after_first} GPUs are free.
    second = [m["metadata"]["name"] for m in sc.gang("second", size, gpus=per_pod, required="rack")]
    sc.assert_unbound_for(second, 8, what="gang 'second' (no rack can hold it)")
    messages = sc.wait_for(
        "Quorum's reason for gang 'second' in a FailedScheduling event",
        lambda: [m for m in sc.scheduling_messages() if f"gang {sc.ns}/second" in m], timeout=10)
    sc.record("second_gang_reason", messages[-1][:300])

    sc.watcher.retire("first")
    sc.delete(first)
    placement = sc.wait_bound(second, timeout=90, what="gang 'second' bound after 'first' was deleted")
    used_racks, _ = sc.racks_and_blocks(placement)
    assert used_racks == {whole_rack}, f"gang 'second' must fill rack {whole_rack}, got {placement}"
    sc.finish()


def test_the_only_free_rack_is_handed_from_gang_to_gang_without_stalling(scenario: Scenario) -> None:
    """Gangs queue for the one rack that can hold them; each binds as soon as the previous one goes.

    A waiting gang is retried by kube-scheduler on every deletion of the previous gang's pods, and
    kube-scheduler's watch and Quorum's can each be ahead of the other by a few of those deletions.
    Quorum must never keep an answer computed from a partly freed rack once the whole rack is free
    (that gang would otherwise wait for the scheduler's 5-minute flush). Several rounds make such an
    interleaving likely.
    """
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    gpn, rack_gpus = topo.gpus_per_node, topo.rack_gpus
    why = topo.shortfall(nodes_per_rack=2) or (None if len(racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    whole_rack = racks[-1]
    sc.blockers([topo.racks[r][0] for r in racks[:-1]], gpus=gpn)
    per_pod = max(1, gpn // 2)
    size = rack_gpus // per_pod

    def queue(name: str) -> list[str]:
        return [m["metadata"]["name"] for m in sc.gang(name, size, gpus=per_pod, required="rack")]

    holder = queue("round-0")
    sc.wait_bound(holder, timeout=60, what="gang 'round-0' bound")
    handovers: list[float] = []
    for i in range(1, 11):
        waiting = queue(f"round-{i}")
        sc.wait_for(f"gang 'round-{i}' rejected while the rack is taken",
                    lambda i=i: [m for m in sc.scheduling_messages() if f"gang {sc.ns}/round-{i}" in m],
                    timeout=20)
        sc.watcher.retire(f"round-{i - 1}")
        started = time.monotonic()
        sc.delete(holder, wait=False)
        placement = sc.wait_bound(waiting, timeout=45,
                                  what=f"gang 'round-{i}' bound after 'round-{i - 1}' was deleted")
        handovers.append(round(time.monotonic() - started, 2))
        used_racks, _ = sc.racks_and_blocks(placement)
        assert used_racks == {whole_rack}, f"gang 'round-{i}' must fill rack {whole_rack}, got {placement}"
        sc.delete(holder)  # gone for good before the next round starts
        holder = waiting
    sc.record("handover_seconds", handovers)
    sc.finish()


def test_preferred_rack_gang_larger_than_a_rack_uses_fewest_racks_in_one_block(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(racks_per_block=2)
    if why:
        pytest.skip(why)
    size = topo.rack_gpus + topo.gpus_per_node  # default cluster: 40 x 1 GPU, racks of 32 GPUs
    names = [m["metadata"]["name"] for m in sc.gang("wide", size, gpus=1, preferred="rack")]
    placement = sc.wait_bound(names, timeout=60)
    racks, blocks = sc.racks_and_blocks(placement)
    fewest = math.ceil(size / topo.rack_gpus)
    assert len(racks) == fewest and len(blocks) == 1, (
        f"{size} x 1 GPU with preferred rack should use {fewest} racks in one block, "
        f"got racks {sorted(racks)} in blocks {sorted(blocks)}")
    sc.record("racks_used", sorted(racks))
    sc.finish()
