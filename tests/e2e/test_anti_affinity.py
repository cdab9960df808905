"""Members that must not share a node: a gang with required host anti-affinity between its own
members binds one member per node on its first placement.

Each member needs only a fraction of a node, so a plan that ignored the rule would pack several
members onto one node; kube-scheduler's own filter would then refuse them and Quorum would re-plan
(and, after ``maxReplans``, back off). The re-plans are counted as reservation releases with reason
``replan``: that count must not move.
"""

from __future__ import annotations

from typing import Any

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e

HOSTNAME_LABEL = "kubernetes.io/hostname"
GANG_LABEL = "e2e.quorum.dev/gang"


def one_per_host(member: dict[str, Any]) -> dict[str, Any]:
    """The member repels every pod of its own gang, per host (one worker per host)."""
    gang = member["metadata"]["labels"][GANG_LABEL]
    member["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {GANG_LABEL: gang}}, "topologyKey": HOSTNAME_LABEL}]}}
    return member


def test_gang_with_host_anti_affinity_binds_one_member_per_node_at_once(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=2, gpus_per_node=2)  # room for 2 members a node, else no test
    if why:
        pytest.skip(why)
    size = min(8, len(topo.nodes))  # default cluster: 8 members of 1 GPU on nodes of 8 GPUs
    replans_before = sc.quorum.metric("quorum_reservation_releases_total", reason="replan")
    fits_before = sc.quorum.metric("quorum_placements_total", result="fit")

    members = [one_per_host(m) for m in sc.gang("apart", size, gpus=1, create=False)]
    names = sc.create(members)
    placement = sc.wait_bound(names, timeout=60, what=f"gang 'apart' ({size} pods) bound")
    nodes = sorted(placement.values())
    assert len(set(nodes)) == size, f"one member per node expected, got {placement}"

    replans = sc.quorum.metric("quorum_reservation_releases_total", reason="replan") - replans_before
    fits = sc.quorum.metric("quorum_placements_total", result="fit") - fits_before
    assert replans == 0, f"the gang was re-planned {replans} times: its first plan broke the rule"
    sc.record("nodes_used", len(set(nodes)))
    sc.record("placements", fits)
    sc.finish()


def test_gang_larger_than_the_nodes_is_refused_saying_members_are_kept_apart(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(gpus_per_node=2)
    if why:
        pytest.skip(why)
    size = len(topo.nodes) + 1  # fits by GPUs, not one per node
    if size > topo.total_gpus:
        pytest.skip("needs more GPUs than nodes")
    replans_before = sc.quorum.metric("quorum_reservation_releases_total", reason="replan")

    members = [one_per_host(m) for m in sc.gang("too-many", size, gpus=1, create=False)]
    names = sc.create(members)
    # Its first reasons may still say members are missing (they are created in parallel).
    messages = sc.wait_for(
        "Quorum's no-fit reason for gang 'too-many' in a FailedScheduling event",
        lambda: [m for m in sc.scheduling_messages()
                 if f"gang {sc.ns}/too-many" in m and "candidate nodes fit" in m], timeout=30)
    assert "at most one member per node" in messages[-1], messages[-1]
    sc.assert_unbound_for(names, 5, what="gang 'too-many' (more members than nodes)")
    replans = sc.quorum.metric("quorum_reservation_releases_total", reason="replan") - replans_before
    assert replans == 0, f"the gang was reserved and re-planned {replans} times instead of refused"
    sc.record("gang_reason", messages[-1][:300])
    sc.watcher.retire("too-many")
    sc.delete(names)
    sc.finish()
