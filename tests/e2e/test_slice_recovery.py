"""A running sliced gang that loses a member gets the replacement back into the slice that lost it.

Kueue's slice annotations cut a gang into slices of 2 consecutive members, each slice inside one
rack. After the gang runs, its victim's rack is made the loosest (two more free nodes) and the other
slice's rack the tightest (one free node): packing alone would put the replacement there, splitting
the victim's slice over two racks.
"""

from __future__ import annotations

import time

import pytest

from .lifecycle_support import fail_pod, live_bound, start_gang
from .scenario import Scenario

pytestmark = pytest.mark.e2e

ANN_RECOVERY_TIMEOUT = "quorum.dev/recovery-timeout-seconds"
SLICE_LEVEL = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


def test_the_replacement_of_a_sliced_gang_goes_back_into_its_slices_rack(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=4) or (None if len(topo.racks) >= 2 else "needs 2 racks")
    if why:
        pytest.skip(why)
    gpn = topo.gpus_per_node
    first, second = list(topo.racks)[:2]
    # Two free nodes in each of two racks, everything else taken: one slice (2 whole-node members)
    # per rack.
    free = topo.racks[first][:2] + topo.racks[second][:2]
    held = {node: name for node, name in zip(
        sorted(set(topo.nodes) - set(free)),
        sc.blockers(sorted(set(topo.nodes) - set(free)), gpus=gpn), strict=True)}
    sc.watcher.grace = 60.0  # recovering: one member short while the Job replaces it
    start_gang(sc, "sliced", 4, gpn, group_annotations={ANN_RECOVERY_TIMEOUT: "120"},
               pod_annotations={SLICE_LEVEL: sc.settings.rack_label, SLICE_SIZE: "2"})
    placement = sc.wait_for("the sliced gang bound", lambda: live_bound(sc, "sliced", 4), timeout=60)
    racks = {name: topo.rack_of(node) for name, node in placement.items()}
    assert sorted(racks.values()) == sorted([first, first, second, second]), placement

    victim = sorted(placement)[0]
    home = racks[victim]
    other = second if home == first else first
    # The victim's rack gets two more free nodes, the other rack one: the other is now the tighter.
    sc.delete([held[n] for n in topo.racks[home][2:4]] + [held[topo.racks[other][2]]])
    fail_pod(sc.kube, sc.ns, victim)
    failed_at = time.monotonic()

    again = sc.wait_for("the replacement bound",
                        lambda: (p if (p := live_bound(sc, "sliced", 4)) and victim not in p else None),
                        timeout=90)
    replacement = sorted(set(again) - set(placement))
    assert len(replacement) == 1, again
    landed = topo.rack_of(again[replacement[0]])
    sc.record("replacement", {"rack": landed, "slice_rack": home, "tighter_rack": other,
                              "after_seconds": round(time.monotonic() - failed_at, 1)})
    assert landed == home, (f"the replacement went to rack {landed}; its slice is in rack {home} "
                            f"(the slice would be split across racks)")
    sc.finish()
