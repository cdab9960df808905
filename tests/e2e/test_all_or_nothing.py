"""All-or-nothing: gangs bind whole or not at all, and never deadlock each other.

Without Quorum's quorum gate and bind hold, kube-scheduler would bind every member that fits on its
own: part of a gang that needs more than is free, part of each of two competing gangs (a deadlock),
and the members of a gang whose other members do not exist yet.
"""

from __future__ import annotations

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_gang_needing_more_than_is_free_binds_nothing_until_capacity_frees(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    gpn = topo.gpus_per_node
    per_pod = max(1, gpn // 2)
    size = topo.rack_gpus // per_pod  # default cluster: 8 pods x 4 GPUs = 32 GPUs
    free_nodes = max(1, topo.nodes_per_rack // 2)  # default cluster: 2 nodes = 16 GPUs stay free
    why = topo.shortfall(nodes_per_rack=2) or (
        None if per_pod <= free_nodes * gpn < size * per_pod and len(topo.racks) > free_nodes
        else "topology too small for a gang that partly fits")
    if why:
        pytest.skip(why)
    # Keep one node free in each of the first racks; fill every other node with a plain pod.
    free = {topo.racks[r][0] for r in list(topo.racks)[:free_nodes]}
    blockers = sc.blockers(sorted(set(topo.nodes) - free), gpus=gpn)

    names = [m["metadata"]["name"] for m in sc.gang("big", size, gpus=per_pod)]
    # Members fit on the free nodes one by one; the gang as a whole does not.
    sc.assert_unbound_for(names, 12, what=f"members of gang 'big' ({size} x {per_pod} GPUs, "
                                          f"{free_nodes * gpn} GPUs free)")
    messages = sc.wait_for(
        "Quorum's reason in a FailedScheduling event",
        lambda: [m for m in sc.scheduling_messages() if f"gang {sc.ns}/big" in m], timeout=10)
    debug = sc.gang_debug("big") or {}
    sc.record("reason", {"event": messages[-1][:300], "debug_phase": debug.get("phase"),
                         "debug_reason": str(debug.get("reason"))[:300]})

    sc.delete(blockers)
    sc.wait_bound(names, timeout=90, what="gang 'big' bound after the blockers were deleted")
    sc.finish()


def test_two_gangs_that_cannot_both_fit_bind_one_whole_then_the_other(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    gpn, nodes = topo.gpus_per_node, len(topo.nodes)
    size = nodes // 2 + 1  # default cluster: 17 whole-node pods each, 34 > 32 nodes
    if size > nodes or nodes < 3:
        pytest.skip("needs at least 3 GPU nodes")
    a = sc.gang("alpha", size, gpus=gpn, create=False)
    b = sc.gang("beta", size, gpus=gpn, create=False)
    sc.create([m for pair in zip(a, b, strict=True) for m in pair])  # interleaved, as a race would
    names = {"alpha": [m["metadata"]["name"] for m in a], "beta": [m["metadata"]["name"] for m in b]}

    def a_winner() -> str | None:
        for gang, members in names.items():
            if all(sc.placement(members).values()):
                return gang
        return None

    winner = sc.wait_for("one gang fully bound", a_winner, timeout=60)
    loser = "beta" if winner == "alpha" else "alpha"
    bound = {n: node for n, node in sc.placement(names[loser]).items() if node}
    assert not bound, f"gang {loser} must bind nothing while {winner} holds the capacity: {bound}"
    sc.assert_unbound_for(names[loser], 8, what=f"members of the losing gang {loser}")
    assert all(sc.placement(names[winner]).values()), f"gang {winner} lost members"
    sc.record("winner", winner)

    sc.watcher.retire(winner)  # its count falls through partial values while it is deleted
    sc.delete(names[winner])
    sc.wait_bound(names[loser], timeout=90, what=f"gang {loser} bound after {winner} finished")
    sc.finish()


def test_gang_with_fewer_pods_than_min_count_binds_nothing_until_complete(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    min_count, gpus = 4, min(2, topo.gpus_per_node)
    early = [m["metadata"]["name"] for m in sc.gang("partial", min_count - 1, gpus=gpus, min_count=min_count)]
    sc.assert_unbound_for(early, 10, what=f"{min_count - 1} of {min_count} members")
    debug = sc.gang_debug("partial") or {}
    messages = [m for m in sc.scheduling_messages() if f"gang {sc.ns}/partial" in m]
    assert debug.get("phase") == "WaitingForMembers" or messages, (
        f"Quorum should report the gang as waiting for members: debug={debug} events={messages}")
    sc.record("waiting", {"debug_phase": debug.get("phase"), "event": (messages or [""])[-1][:200]})

    last = [m["metadata"]["name"] for m in sc.gang("partial", 1, gpus=gpus, min_count=min_count,
                                                   first=min_count - 1)]
    sc.wait_bound(early + last, timeout=60, what="all members bound once the last one exists")
    sc.finish()
