"""Preemption through the real kube-scheduler: whole gangs or nothing.

- A high-priority gang whose required rack is too small for it will never bind. kube-scheduler's
  own preemption sees only one member at a time: without Quorum's whole-gang check it evicts the
  plain pods holding the GPUs, member by member, and the gang still binds nothing.
- A high-priority gang that fits only by displacing lower-priority work gets it: Quorum evicts a
  whole lower-priority gang (never part of one, never a gang of higher priority) or the one plain
  pod in its way, and the gang binds where they ran. The victims' Job recreates them; they wait.
- A gang whose pods say ``preemptionPolicy: Never`` displaces nothing.

Quorum runs with the shipped default, ``preemption.enabled: true`` (tests/e2e/quorum-e2e.yaml sets
nothing about it). Gangs are Indexed Jobs with a
PodGroup; priorities come from PriorityClasses. Victim PodGroups say ``disruptionMode: {all: {}}``
(1.37's apiserver fills in ``single`` otherwise; ``test_disruption_mode.py`` covers that).
"""

from __future__ import annotations

import time

import pytest

from .lifecycle_support import (
    HIGH,
    HIGH_NEVER,
    LOW,
    MID,
    job_pods,
    live_bound,
    quorum_events,
    start_gang,
)
from .reconfigure import Reconfigurer
from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_a_gang_that_cannot_fit_even_by_preemption_evicts_nothing(scenario: Scenario,
                                                                  priorities: dict[str, int]) -> None:
    sc, topo = scenario, scenario.topo
    rack = next(iter(topo.racks))
    nodes = topo.racks[rack]
    blockers = sc.blockers(nodes, gpus=topo.gpus_per_node)  # every GPU of one rack, priority 0
    # One member more than the rack has nodes, each a whole node: no rack can ever hold it.
    size = len(nodes) + 1
    members = sc.gang("huge", size, gpus=topo.gpus_per_node, required="rack", create=False)
    for manifest in members:
        manifest["spec"]["priorityClassName"] = HIGH
        manifest["spec"]["nodeSelector"] = {sc.settings.rack_label: rack}  # only the full rack passes
    before = sc.quorum.metric("quorum_preemptions_refused_total")
    names = sc.create(members)
    sc.wait_for("Quorum to refuse the preemption",
                lambda: sc.quorum.metric("quorum_preemptions_refused_total") > before, timeout=60)
    time.sleep(5)  # kube-scheduler keeps retrying; any eviction would show by now
    pods = sc.pods_named(blockers)
    evicted = sorted(n for n in blockers if n not in pods or pods[n]["metadata"].get("deletionTimestamp"))
    assert not evicted, f"plain pods evicted for a gang that cannot fit: {evicted}"
    assert not any(sc.placement(names).values()), "the gang must bind nothing"
    sc.record("preemptions_refused", sc.quorum.metric("quorum_preemptions_refused_total") - before)
    sc.finish()


# ------------------------------------------------------------------ Quorum's whole-gang preemption
def high_blockers(sc: Scenario, nodes: list[str]) -> list[str]:
    """Whole-node plain pods at the preemptor's own priority: never victims (only lower ones are)."""
    return sc.blockers(nodes, gpus=sc.topo.gpus_per_node, prefix="keep", priority_class=HIGH)


def all_running(sc: Scenario, names: list[str]) -> bool:
    pods = sc.pods_named(names)
    return len(pods) == len(names) and all(not p["metadata"].get("deletionTimestamp") for p in pods.values())


def quorum_event_reasons(sc: Scenario, kind: str, name: str) -> list[str]:
    return [str(e.get("reason")) for e in quorum_events(sc, kind, name)]


def test_a_high_priority_gang_evicts_the_lower_of_two_gangs_whole_and_binds(
        scenario: Scenario, priorities: dict[str, int]) -> None:
    """Acceptance (d), and the native tests' "gangs of different priority": two racks run a gang
    each (priority 100 and 500), every other rack is full at the preemptor's priority (1000)."""
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    why = topo.shortfall(nodes_per_rack=2) or (None if len(racks) >= 3 else "needs >= 3 racks")
    if why:
        pytest.skip(why)
    size, gpn = len(topo.racks[racks[0]]), topo.gpus_per_node
    sc.watcher.grace = 30.0  # the victim's members go one eviction call each
    keep = high_blockers(sc, [n for r in racks[2:] for n in topo.racks[r]])
    start_gang(sc, "low", size, gpn, rack=True, priority_class=LOW, disruption="all")
    start_gang(sc, "mid", size, gpn, rack=True, priority_class=MID, disruption="all")
    low = sc.wait_for("gang low bound", lambda: live_bound(sc, "low", size), timeout=60)
    mid = sc.wait_for("gang mid bound", lambda: live_bound(sc, "mid", size), timeout=60)
    (low_rack,) = {topo.rack_of(n) for n in low.values()}

    start_gang(sc, "high", size, gpn, rack=True, priority_class=HIGH)
    started = time.monotonic()
    placed = sc.wait_for("gang high bound", lambda: live_bound(sc, "high", size), timeout=90)
    bound_after = round(time.monotonic() - started, 1)
    assert {topo.rack_of(n) for n in placed.values()} == {low_rack}, placed
    assert all_running(sc, list(mid)), "the gang of priority 500 must not lose a member"
    assert all_running(sc, keep), "pods at the preemptor's own priority are never victims"
    gone = [n for n in low if n not in sc.pods_named(low) or sc.pods_named([n])[n]["metadata"].get(
        "deletionTimestamp")]
    assert sorted(gone) == sorted(low), f"the lower gang goes whole: {gone} of {sorted(low)}"
    # Its Job recreates the members; with no rack free they wait, bound nowhere.
    again = sc.wait_for("gang low recreated", lambda: [p["metadata"]["name"] for p in job_pods(
        sc.kube, sc.ns, "low") if p["metadata"]["name"] not in low] or None, timeout=60)
    sc.assert_unbound_for(again, 5, what="the preempted gang's new pods")
    assert "Preempting" in quorum_event_reasons(sc, "PodGroup", "high")
    assert "Preempted" in quorum_event_reasons(sc, "PodGroup", "low")
    sc.record("preempted_gang", {"bound_after_seconds": bound_after,
                                 "longest_partial_seconds": sc.watcher.longest_partial.get("low")})
    sc.finish()


def _rack_short_of_one_node(sc: Scenario, never: bool, victim_scheduler: str = "") -> tuple[
        list[str], str, list[str], list[str]]:
    """Every rack full at priority 1000 except one, where one node holds a plain pod of priority 0.
    A gang of one whole node per member of that rack, at priority 1000, fits only by evicting it.

    ``victim_scheduler``: "quorum", the plain pod is placed on the node by Quorum's own profile;
    otherwise it is bound directly (``spec.nodeName``), as another scheduler of that name (empty:
    the suite's usual blocker) would have bound it."""
    topo = sc.topo
    racks = list(topo.racks)
    target = racks[0]
    keep = high_blockers(sc, [n for r in racks[1:] for n in topo.racks[r]])
    if victim_scheduler == "quorum":
        victim = scheduled_plain_pod(sc, topo.racks[target][0], victim_scheduler)
    else:
        (victim,) = sc.blockers([topo.racks[target][0]], gpus=topo.gpus_per_node, prefix="low",
                                scheduler_name=victim_scheduler)
    size = len(topo.racks[target])
    members = sc.gang("g", size, gpus=topo.gpus_per_node, required="rack", create=False)
    for manifest in members:
        manifest["spec"]["priorityClassName"] = HIGH_NEVER if never else HIGH
    return keep, victim, sc.create(members), topo.racks[target]


def scheduled_plain_pod(sc: Scenario, node: str, scheduler: str) -> str:
    """A whole-node plain pod of priority 0 that ``scheduler`` places on ``node`` (a node selector
    on its hostname), not bound directly."""
    manifest = sc.pod("low-0", gpus=sc.topo.gpus_per_node)
    manifest["spec"]["schedulerName"] = scheduler
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    (name,) = sc.create([manifest])
    placed = sc.wait_bound([name], timeout=60, what=f"the plain pod placed by {scheduler}")
    assert placed[name] == node, placed
    return name


@pytest.mark.parametrize("victim_scheduler", ["", "default-scheduler", "quorum"],
                         ids=["bound-directly", "another-scheduler", "quorum-profile"])
def test_a_gang_that_fits_only_by_evicting_one_lower_priority_pod_evicts_just_it(
        scenario: Scenario, priorities: dict[str, int], victim_scheduler: str) -> None:
    """The native and coscheduling integration tests' "fits only by preempting a lower-priority
    pod", for a gang: exactly that pod goes, whichever scheduler placed it, and the gang binds in
    its rack (kube-scheduler's rule: victims are any lower-priority pods on the chosen nodes)."""
    sc = scenario
    if sc.topo.shortfall(nodes_per_rack=2) or len(sc.topo.racks) < 2:
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    keep, victim, names, rack_nodes = _rack_short_of_one_node(sc, never=False,
                                                              victim_scheduler=victim_scheduler)
    placed = sc.wait_bound(names, timeout=90, what="the gang bound after its victim went")
    assert set(placed.values()) == set(rack_nodes)
    assert victim not in sc.pods_named([victim]) or sc.pods_named([victim])[victim]["metadata"].get(
        "deletionTimestamp"), "the one lower-priority pod is evicted"
    assert all_running(sc, keep), "nothing at the gang's own priority is evicted"
    sc.finish()


def test_gangs_of_two_priorities_created_interleaved_the_higher_binds_whole(
        scenario: Scenario, priorities: dict[str, int]) -> None:
    """One free rack, two gangs that each need all of it, their pods created in turns (mid-0,
    high-0, mid-1, ...). The mid gang's last pod comes first, so it binds in the rack; once the
    high gang's last pod exists, the mid gang is evicted whole and the high gang binds whole there.
    Nothing is ever left partly bound (the watcher checks it throughout)."""
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    if topo.shortfall(nodes_per_rack=2) or len(racks) < 2:
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    sc.watcher.grace = 30.0  # an evicted gang's members go one eviction call each
    free = racks[0]
    keep = high_blockers(sc, [n for r in racks[1:] for n in topo.racks[r]])
    size = len(topo.racks[free])
    gangs = {}
    for name, priority_class in (("mid", MID), ("high", HIGH)):
        gangs[name] = sc.gang(name, size, gpus=topo.gpus_per_node, required="rack", create=False)
        for manifest in gangs[name]:
            manifest["spec"]["priorityClassName"] = priority_class
    mid_names = [m["metadata"]["name"] for m in gangs["mid"]]
    high_names = [m["metadata"]["name"] for m in gangs["high"]]
    for mid, high in zip(gangs["mid"][:-1], gangs["high"][:-1], strict=True):
        sc.create([mid], workers=1)
        sc.create([high], workers=1)
    sc.create(gangs["mid"][-1:], workers=1)
    held = sc.wait_bound(mid_names, timeout=60, what="the mid gang bound in the free rack")
    assert set(held.values()) == set(topo.racks[free]), held
    sc.create(gangs["high"][-1:], workers=1)
    started = time.monotonic()
    placed = sc.wait_bound(high_names, timeout=90, what="the higher-priority gang bound whole")
    bound_after = round(time.monotonic() - started, 1)
    assert set(placed.values()) == set(topo.racks[free]), placed
    live_mid = {n: p for n, p in sc.pods_named(mid_names).items()
                if not p["metadata"].get("deletionTimestamp")}
    assert not live_mid, f"the mid gang is evicted whole: {sorted(live_mid)} still there"
    assert all_running(sc, keep), "pods at the preemptor's own priority are never victims"
    assert "Preempted" in quorum_event_reasons(sc, "Pod", mid_names[0]) or \
        "Preempting" in quorum_event_reasons(sc, "Pod", high_names[0])
    sc.record("interleaved", {"high_bound_after_seconds": bound_after,
                              "longest_partial_seconds": sc.watcher.longest_partial.get("mid")})
    sc.finish()


def test_a_gang_whose_pods_never_preempt_evicts_nothing(scenario: Scenario,
                                                       priorities: dict[str, int]) -> None:
    """Acceptance (e): ``preemptionPolicy: Never`` on the gang's pods; the lower-priority pod stays."""
    sc = scenario
    if sc.topo.shortfall(nodes_per_rack=2) or len(sc.topo.racks) < 2:
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    keep, victim, names, _ = _rack_short_of_one_node(sc, never=True)
    sc.assert_unbound_for(names, 8, what="a gang that may not preempt")
    assert all_running(sc, [victim, *keep]), "nothing is evicted for a gang that never preempts"
    assert "Preempting" not in quorum_event_reasons(sc, "Pod", "g-0")
    sc.finish()


def test_with_preemption_disabled_a_gang_evicts_nothing(reconfigure: Reconfigurer, scenario: Scenario,
                                                        priorities: dict[str, int]) -> None:
    """Acceptance (e), the other half: ``preemption.enabled: false``. Quorum evicts nothing, and
    its ``/preempt`` answer takes kube-scheduler's own per-pod proposals for the gang away."""
    sc = scenario
    if sc.topo.shortfall(nodes_per_rack=2) or len(sc.topo.racks) < 2:
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    reconfigure.apply({"preemption": {"enabled": False}})
    keep, victim, names, _ = _rack_short_of_one_node(sc, never=False)
    sc.assert_unbound_for(names, 8, what="a gang while preemption is disabled")
    assert all_running(sc, [victim, *keep]), "nothing is evicted with preemption disabled"
    assert "Preempting" not in quorum_event_reasons(sc, "Pod", "g-0")
    sc.finish()
