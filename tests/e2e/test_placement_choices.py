"""Which of several feasible places Quorum picks, through the real kube-scheduler.

Both promises are choices between places that would all work: kube-scheduler's own scoring spreads
pods over the emptiest nodes, so without Quorum's packing and distance scores these pods would land
almost anywhere else.

* **Tightest fit** — of the racks that can hold a gang, the one with the least free capacity wins
  (emptier racks stay whole for larger gangs).
* **Scored towards the gang** — members beyond ``minCount`` are not placed with the gang; they go
  through kube-scheduler's filters and Quorum's prioritize, which draws them to the gang's nodes.
"""

from __future__ import annotations

import time

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_a_gang_lands_in_the_fullest_rack_that_still_holds_it(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    gpn, per_rack = topo.gpus_per_node, topo.nodes_per_rack
    why = topo.shortfall(nodes_per_rack=3) or (None if len(racks) >= 3 else "needs >= 3 racks")
    if why:
        pytest.skip(why)
    # Whole nodes taken with blockers: racks[0] is too full for the gang, racks[1] holds it with a
    # node to spare, racks[2] holds it exactly (the tightest fit), every other rack is empty.
    too_full, loose, tightest = racks[0], racks[1], racks[2]
    gang_nodes = per_rack - 2
    taken = (topo.racks[too_full][: per_rack - gang_nodes + 1] + topo.racks[loose][:1]
             + topo.racks[tightest][:2])
    sc.blockers(taken, gpus=gpn)

    per_pod = max(1, gpn // 2)
    size = gang_nodes * gpn // per_pod  # default cluster: 4 pods x 4 GPUs = 2 whole nodes
    started = time.monotonic()
    names = [m["metadata"]["name"] for m in sc.gang("packed", size, gpus=per_pod, required="rack")]
    placement = sc.wait_bound(names, timeout=60, what=f"gang 'packed' ({size} pods) bound")
    sc.record("bound_after_seconds", round(time.monotonic() - started, 2))
    used_racks, _ = sc.racks_and_blocks(placement)
    free = {r: (per_rack - sum(1 for n in taken if topo.rack_of(n) == r)) * gpn for r in racks}
    assert used_racks == {tightest}, (
        f"gang 'packed' ({size * per_pod} GPUs) must land in rack {tightest}, the fullest that holds "
        f"it ({free[tightest]} GPUs free), not in {sorted(used_racks)}; free GPUs per rack before: {free}")
    free_nodes = set(topo.racks[tightest]) - set(taken)
    assert set(placement.values()) == free_nodes, (
        f"gang 'packed' must fill the free nodes of rack {tightest} {sorted(free_nodes)}: {placement}")
    sc.finish()


def test_members_beyond_min_count_are_scored_towards_the_gangs_rack(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    gpn, per_rack = topo.gpus_per_node, topo.nodes_per_rack
    why = topo.shortfall(nodes_per_rack=3) or (None if len(topo.racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    # Whole-node members: kube-scheduler's own scores tie on every empty node, so only Quorum's
    # distance score tells the near nodes (the gang's rack) from the many far ones.
    quorum, extra = 2, per_rack - 2
    core = [m["metadata"]["name"] for m in sc.gang("near", quorum, gpus=gpn)]
    placement = sc.wait_bound(core, timeout=60, what="the gang's first minCount members bound")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1, f"a gang of {quorum} whole nodes should be packed into one rack: {placement}"
    (rack,) = racks
    near = set(topo.racks[rack]) - set(placement.values())
    far = len(topo.nodes) - len(topo.racks[rack])

    started = time.monotonic()
    more = [m["metadata"]["name"]
            for m in sc.gang("near", extra, gpus=gpn, min_count=quorum, first=quorum)]
    late = sc.wait_bound(more, timeout=60, what=f"{extra} members beyond minCount bound")
    sc.record("extra_members_bound_after_seconds", round(time.monotonic() - started, 2))
    assert set(late.values()) == near, (
        f"members beyond minCount must go to the free nodes of the gang's rack {rack} "
        f"{sorted(near)} (with {far} free nodes elsewhere), got {late}")
    sc.finish()


def test_pods_of_a_basic_group_are_scored_towards_where_the_group_runs(scenario: Scenario) -> None:
    """A ``basic`` PodGroup is no gang (no quorum, no reservation), yet its pods are drawn together."""
    sc, topo = scenario, scenario.topo
    gpn, per_rack = topo.gpus_per_node, topo.nodes_per_rack
    why = topo.shortfall(nodes_per_rack=2) or (None if len(topo.racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    sc.kube.create_podgroup(sc.ns, "loose", None)
    (first,) = sc.create([sc.pod("loose-0", gpus=gpn, pod_group="loose")])
    node = sc.wait_bound([first], timeout=60, what="the group's first pod bound")[first]
    rack = topo.rack_of(node)
    near = set(topo.racks[rack]) - {node}

    started = time.monotonic()
    more = sc.create([sc.pod(f"loose-{i}", gpus=gpn, pod_group="loose") for i in range(1, per_rack)])
    late = sc.wait_bound(more, timeout=60, what=f"{len(more)} more pods of the basic group bound")
    sc.record("more_pods_bound_after_seconds", round(time.monotonic() - started, 2))
    assert set(late.values()) == near, (
        f"pods of the basic group must fill the free nodes of its rack {rack} {sorted(near)} "
        f"(with {len(topo.nodes) - per_rack} free nodes elsewhere), got {late}")
    sc.finish()
