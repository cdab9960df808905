"""Gangs declared the ways users already declare them, through the real kube-scheduler: the
coscheduling and Volcano PodGroups (the suite installs minimal CRDs for them), Koordinator's and
Kueue's pod annotations, Kueue's topology annotations (required, preferred, slices) and a Kueue
Topology for the levels. Part of the API-version suite: it runs on every Kubernetes version.

Each gang is first created one member short of its quorum, and no member may bind; without the
convention's adapter Quorum would not see a gang and kube-scheduler would bind them one by one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from .conventions_support import COSCHEDULING, KUEUE, VOLCANO, all_but_last_wait, create_object, member
from .reconfigure import Reconfigurer
from .scenario import Scenario

pytestmark = [pytest.mark.e2e, pytest.mark.api_suite]


def bind_whole(sc: Scenario, pods: list[dict[str, Any]], what: str) -> dict[str, str]:
    names = all_but_last_wait(sc, pods, what)
    placement = sc.wait_bound(names, timeout=60, what=f"{what} bound whole")
    sc.record(f"{what} bind skew", sc.bind_skew(names))
    return placement


def test_coscheduling_podgroup_gang_binds_whole(scenario: Scenario) -> None:
    sc = scenario
    create_object(sc, COSCHEDULING, "cosched", {"minMember": 4, "scheduleTimeoutSeconds": 20})
    pods = [member(sc, "cosched", i, 4, gpus=2, labels={"scheduling.x-k8s.io/pod-group": "cosched"})
            for i in range(4)]
    bind_whole(sc, pods, "coscheduling gang")
    sc.finish()


def test_volcano_podgroup_gang_binds_whole(scenario: Scenario) -> None:
    sc = scenario
    create_object(sc, VOLCANO, "vc", {"minMember": 3})
    pods = [member(sc, "vc", i, 3, gpus=2, annotations={"scheduling.k8s.io/group-name": "vc"})
            for i in range(3)]
    bind_whole(sc, pods, "Volcano gang")
    sc.finish()


def test_koordinator_annotated_gang_binds_whole(scenario: Scenario) -> None:
    sc = scenario
    gang = {"gang.scheduling.koordinator.sh/name": "koord",
            "gang.scheduling.koordinator.sh/min-available": "3"}
    pods = [member(sc, "koord", i, 3, gpus=2, annotations=gang) for i in range(3)]
    bind_whole(sc, pods, "Koordinator gang")
    sc.finish()


def kueue_member(sc: Scenario, gang: str, index: int, size: int, gpus: int,
                 **topology: str) -> dict[str, Any]:
    annotations = {KUEUE + "pod-group-total-count": str(size)}
    annotations.update({KUEUE + key.replace("_", "-"): value for key, value in topology.items()})
    return member(sc, gang, index, size, gpus=gpus, labels={KUEUE + "pod-group-name": gang},
                  annotations=annotations)


def test_kueue_gang_requiring_a_block_and_preferring_a_rack(scenario: Scenario) -> None:
    """Kueue #9361's case: the tighter block b0 has no rack with room for the gang, b1 has one; the
    gang lands whole in that rack. Then a gang no block can hold waits, though the cluster could."""
    sc, topo = scenario, scenario.topo
    blocks = list(topo.blocks)
    gpn = topo.gpus_per_node
    if len(blocks) < 2 or any(len(topo.blocks[b]) < 2 or len(topo.racks[r]) < 4
                              for b in blocks for r in topo.blocks[b]):
        pytest.fail("needs 2 blocks of >= 2 racks of >= 4 nodes (the suite's default cluster)")
    # Every rack keeps 2 free nodes, except the first rack of b1, which keeps 4.
    held = [n for b in blocks for r in topo.blocks[b] for n in topo.racks[r][2:]
            if r != topo.blocks[blocks[1]][0]]
    held += [n for b in blocks[2:] for r in topo.blocks[b] for n in topo.racks[r]]
    sc.blockers(held, gpus=gpn)
    settings = sc.settings
    pods = [kueue_member(sc, "tas", i, 4, gpn, podset_required_topology=settings.block_label,
                         podset_preferred_topology=settings.rack_label) for i in range(4)]
    placement = bind_whole(sc, pods, "Kueue gang (required block, preferred rack)")
    racks, used_blocks = sc.racks_and_blocks(placement)
    assert racks == {topo.blocks[blocks[1]][0]}, f"the gang must fill the free rack of b1: {placement}"
    assert len(used_blocks) == 1
    # Now no block has 9 free nodes (8 and 6), though the cluster has 14: the requirement holds.
    wide = [kueue_member(sc, "wide", i, 9, gpn, podset_required_topology=settings.block_label,
                         podset_preferred_topology=settings.rack_label) for i in range(9)]
    sc.assert_unbound_for(sc.create(wide), 8, what="a gang larger than any block's free nodes")
    reasons = [m for m in sc.scheduling_messages() if f"gang {sc.ns}/wide" in m]
    assert reasons and "best block fits" in reasons[-1], reasons[-1:]
    sc.finish()


def test_kueue_slices_each_inside_one_rack_and_the_gang_in_one_block(scenario: Scenario) -> None:
    """A gang of 6 whole-node members in slices of 3 per rack, inside one block. The only free block
    has racks with 4, 3, 2 and 2 free nodes: packed without slices the gang would take 4 + 2 nodes
    (a slice across two racks); sliced it takes 3 + 3."""
    sc, topo = scenario, scenario.topo
    blocks = list(topo.blocks)
    gpn = topo.gpus_per_node
    if len(topo.blocks[blocks[0]]) < 4 or any(len(topo.racks[r]) < 4 for r in topo.racks):
        pytest.fail("needs a block of >= 4 racks of >= 4 nodes (the suite's default cluster)")
    racks = topo.blocks[blocks[0]]
    keep = {racks[0]: 4, racks[1]: 3, racks[2]: 2, racks[3]: 2}
    held = [n for r in topo.racks for n in topo.racks[r][keep.get(r, 0):]]
    sc.blockers(held, gpus=gpn)
    settings = sc.settings
    pods = [kueue_member(sc, "sliced", i, 6, gpn, podset_required_topology=settings.block_label,
                         podset_slice_required_topology=settings.rack_label, podset_slice_size="3")
            for i in range(6)]
    placement = bind_whole(sc, pods, "Kueue sliced gang")
    per_rack = Counter(topo.rack_of(node) for node in placement.values())
    sc.record("pods per rack", dict(per_rack))
    assert all(count % 3 == 0 for count in per_rack.values()), f"a slice of 3 crosses racks: {dict(per_rack)}"
    assert len({topo.block_of(node) for node in placement.values()}) == 1
    sc.finish()


def test_levels_from_a_kueue_topology(reconfigure: Reconfigurer, scenario: Scenario) -> None:
    """Quorum configured with ``topology.kueueTopology`` takes its levels from the Topology object
    (tests/e2e/crds: block and host, no rack): a gang requiring a rack is then misconfigured and
    says so, and one requiring a block binds inside one."""
    reconfigure.apply({"topology": {"kueueTopology": "quorum-e2e-no-rack", "levels": None}})
    sc = scenario
    rack = [member(sc, "rack", i, 2, gpus=1, annotations={
        "quorum.dev/gang": "rack", "quorum.dev/min-count": "2", "quorum.dev/required-topology": "rack"})
        for i in range(2)]
    sc.create(rack)
    reason = sc.wait_for("the gang requiring a rack reported as misconfigured", lambda: [
        m for m in sc.scheduling_messages() if "required topology 'rack' is not a configured level" in m],
        timeout=30)
    assert "(block, hostname)" in reason[-1], reason[-1]
    block = [member(sc, "block", i, 2, gpus=sc.topo.gpus_per_node, annotations={
        "quorum.dev/gang": "block", "quorum.dev/min-count": "2", "quorum.dev/required-topology": "block"})
        for i in range(2)]
    placement = sc.wait_bound(sc.create(block), timeout=60, what="the gang requiring a block")
    assert len(sc.racks_and_blocks(placement)[1]) == 1
    sc.delete([p["metadata"]["name"] for p in rack])
    sc.finish()
