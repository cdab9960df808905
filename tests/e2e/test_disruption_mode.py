"""A native PodGroup's ``disruptionMode`` and ``preemptionPolicy`` in Quorum's preemption (1.37).

- A higher-priority gang that needs half of a rack held by a lower-priority gang: with
  ``preemption.honorDisruptionMode`` on and that gang's PodGroup saying ``disruptionMode:
  {single: {}}``, only as many of its members as the preemptor needs are evicted and the rest keep
  running below the gang's quorum, as its owner chose; ``{all: {}}`` evicts it whole, and so does
  the shipped default whatever the PodGroup says (the apiserver fills in ``single`` when a PodGroup
  names no mode).
- A gang whose PodGroup says ``preemptionPolicy: Never`` (its pods do not) evicts nothing. The
  apiserver keeps that field only with the alpha gate ``PodGroupPreemptionPolicy`` (hack/cluster-up.sh
  turns it on for 1.37), and its priority admission takes it from the PodGroup's PriorityClass.
"""

from __future__ import annotations

import time

import pytest

from .cluster import PODGROUP_API
from .lifecycle_support import HIGH, HIGH_NEVER, LOW, live_bound, start_gang
from .reconfigure import Reconfigurer
from .scenario import Scenario
from .test_preemption import all_running, high_blockers, quorum_event_reasons

pytestmark = pytest.mark.e2e


def needs_a_rack_of_four(sc: Scenario) -> None:
    if sc.topo.shortfall(nodes_per_rack=4) or len(sc.topo.racks) < 2:
        pytest.skip("needs >= 2 racks of >= 4 nodes")


def live(sc: Scenario, names: list[str]) -> list[str]:
    pods = sc.pods_named(names)
    return sorted(n for n in names if n in pods and not pods[n]["metadata"].get("deletionTimestamp"))


@pytest.mark.parametrize(("mode", "honor"), [("single", True), ("all", True), (None, False)])
def test_a_higher_gang_evicts_as_many_members_as_the_victims_disruption_mode_allows(
        reconfigure: Reconfigurer, scenario: Scenario, priorities: dict[str, int], mode: str | None,
        honor: bool) -> None:
    """Every rack but one is full at the preemptor's priority; gang low (priority 100) fills the
    last one, a whole node per member. Gang high (1000) needs half of that rack. Only with
    ``preemption.honorDisruptionMode`` does ``single`` split the gang; with the shipped default a
    PodGroup that names no mode (the apiserver fills in ``single``) goes whole."""
    if honor:
        reconfigure.apply({"preemption": {"honorDisruptionMode": True}})
    sc, topo = scenario, scenario.topo
    needs_a_rack_of_four(sc)
    split = mode == "single" and honor
    racks = list(topo.racks)
    size, gpn = len(topo.racks[racks[0]]), topo.gpus_per_node
    sc.watcher.grace = 30.0  # an evicted gang's members go one eviction call each
    keep = high_blockers(sc, [n for r in racks[1:] for n in topo.racks[r]])
    start_gang(sc, "low", size, gpn, rack=True, priority_class=LOW, disruption=mode)
    low = sc.wait_for("gang low bound", lambda: live_bound(sc, "low", size), timeout=60)
    group = sc.kube.custom.get_namespaced_custom_object(*PODGROUP_API[:2], sc.ns, PODGROUP_API[2], "low")
    assert group["spec"].get("disruptionMode") == {mode or "single": {}}, group["spec"]
    if split:
        sc.watcher.retire("low")  # left below its quorum on purpose: its owner allowed that

    half = size // 2
    start_gang(sc, "high", half, gpn, rack=True, priority_class=HIGH)
    placed = sc.wait_for("gang high bound", lambda: live_bound(sc, "high", half), timeout=90)
    assert {topo.rack_of(n) for n in placed.values()} == {racks[0]}, placed
    time.sleep(5)  # any further eviction would show by now
    left = live(sc, list(low))
    if split:
        assert len(left) == size - half, f"only {half} of gang low go: {left} still running of {sorted(low)}"
        assert not set(placed.values()) & {low[n] for n in left}, "the preemptor took the freed nodes"
        assert "Preempted" not in quorum_event_reasons(sc, "PodGroup", "low")
    else:
        assert left == [], f"gang low goes whole: {left} still running"
        assert "Preempted" in quorum_event_reasons(sc, "PodGroup", "low")
    assert all_running(sc, keep), "pods at the preemptor's own priority are never victims"
    assert "Preempting" in quorum_event_reasons(sc, "PodGroup", "high")
    sc.finish()


def test_a_gang_whose_podgroup_never_preempts_evicts_nothing(scenario: Scenario,
                                                            priorities: dict[str, int]) -> None:
    """Its pods' class preempts; its PodGroup's class (and so its spec.preemptionPolicy) does not."""
    sc, topo = scenario, scenario.topo
    needs_a_rack_of_four(sc)
    racks = list(topo.racks)
    size, gpn = len(topo.racks[racks[0]]), topo.gpus_per_node
    keep = high_blockers(sc, [n for r in racks[1:] for n in topo.racks[r]])
    (victim,) = sc.blockers([topo.racks[racks[0]][0]], gpus=gpn, prefix="low")
    start_gang(sc, "g", size, gpn, rack=True, priority_class=HIGH, group_priority_class=HIGH_NEVER)
    group = sc.kube.custom.get_namespaced_custom_object(*PODGROUP_API[:2], sc.ns, PODGROUP_API[2], "g")
    assert group["spec"].get("preemptionPolicy") == "Never", f"the apiserver dropped it: {group['spec']}"
    members = sc.wait_for("the gang's pods", lambda: [p["metadata"]["name"] for p in sc.gang_pods(
        "g").values()] if len(sc.gang_pods("g")) == size else None, timeout=60)
    sc.assert_unbound_for(members, 8, what="a gang whose PodGroup never preempts")
    assert all_running(sc, [victim, *keep]), "nothing is evicted for a gang that never preempts"
    assert "Preempting" not in quorum_event_reasons(sc, "PodGroup", "g")
    sc.finish()
