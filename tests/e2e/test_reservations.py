"""Reservations of a gang that is held at bind.

One member has a node selector that no node matches yet: it exists (so it counts towards minCount
and is part of the gang's placement) but kube-scheduler's own filters reject it, so it never reaches
Quorum. The other members therefore reach bind and are *held* there by Quorum, with the whole gang's
placement reserved — for at most the bind timeout (30 s in the suite's configuration), so these
scenarios act within a few seconds. (A scheduling gate would not do: Quorum leaves gated pods out
of a gang's quorum.)
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e

RELEASES = "quorum_reservation_releases_total"
TIMEOUTS = "quorum_reservation_timeouts_total"


def wait_held(sc: Scenario, gang: str, held: int, timeout: float = 20) -> dict[str, Any]:
    """Wait until /debug/gangs shows ``held`` members of ``gang`` held at bind; returns its entry."""
    def state() -> dict[str, Any] | None:
        entry = sc.gang_debug(gang)
        if entry and entry.get("phase") == "Binding" and len(entry.get("held") or []) == held:
            return entry
        return None

    entry: dict[str, Any] = sc.wait_for(f"{held} members of gang {gang!r} held at bind", state, timeout,
                                        interval=0.1)
    return entry


def reserved_elsewhere(sc: Scenario) -> int:
    """Reserved pods of gangs outside this test (normally none)."""
    return sum(len(g.get("reservation") or {}) for key, g in sc.quorum.gangs().items()
               if not key.startswith(sc.ns + "/"))


def test_deleting_a_member_of_a_held_gang_releases_the_reservation(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    size, gpus = 4, max(1, topo.gpus_per_node // 2)
    blocked = f"held-{size - 1}"
    releases_before = sc.quorum.metric(RELEASES, reason="member-deleted")
    timeouts_before = sc.quorum.metric(TIMEOUTS)

    sc.gang("held", size, gpus=gpus, blocked=[size - 1])
    started = time.monotonic()
    entry = wait_held(sc, "held", size - 1)
    assert blocked in (entry.get("reservation") or {}), f"the blocked member must be reserved too: {entry}"
    bound = {n: node for n, node in sc.placement(sc.gang_pods("held")).items() if node}
    assert not bound, f"no member may be bound while the gang is held: {bound}"
    sc.record("held_after_seconds", round(time.monotonic() - started, 2))

    sc.delete([blocked])

    def released() -> bool:
        now = sc.gang_debug("held") or {}
        return (sc.quorum.metric(RELEASES, reason="member-deleted") > releases_before
                and not now.get("reservation") and not now.get("held"))

    sc.wait_for("the reservation released (reason member-deleted)", released, timeout=15)
    assert sc.quorum.metric(TIMEOUTS) == timeouts_before, (
        "the reservation was released by the bind timeout, not by the member's deletion "
        f"(the scenario took {time.monotonic() - started:.1f}s)")
    reserved = sc.quorum.metric("quorum_reserved_pods")
    assert reserved == reserved_elsewhere(sc), f"quorum_reserved_pods={reserved} after the release"
    survivors = [f"held-{i}" for i in range(size - 1)]
    sc.assert_unbound_for(survivors, 3, what="members of the released gang")
    sc.record("released_after_seconds", round(time.monotonic() - started, 2))

    sc.create([sc.pod(blocked, gpus=gpus, gang="held", min_count=size)])  # the member, schedulable now
    sc.wait_bound([*survivors, blocked], timeout=60, what="gang bound once the member is back")
    sc.finish()


def test_plain_pods_never_take_reserved_capacity(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    why = topo.shortfall(nodes_per_rack=2) or (None if len(topo.racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    size, gpn = topo.nodes_per_rack, topo.gpus_per_node
    blocked = f"rack-{size - 1}"
    # Whole-node members in one rack: the held members fill their nodes in kube-scheduler's view
    # (it assumes pods whose bind is in flight); the blocked member's node is free for kube-scheduler
    # and held only by Quorum's reservation.
    sc.gang("rack", size, gpus=gpn, required="rack", blocked=[size - 1])
    started = time.monotonic()
    entry = wait_held(sc, "rack", size - 1)
    reservation: dict[str, str] = entry["reservation"]
    reserved_nodes = set(reservation.values())
    (rack,) = {topo.rack_of(n) for n in reserved_nodes}

    intruder = sc.pod("intruder", gpus=1, node_selector={settings.rack_label: rack}, role="plain")
    bystanders = [sc.pod(f"plain-{i}", gpus=1, role="plain") for i in range(4)]
    sc.create([intruder, *bystanders])
    plain = [m["metadata"]["name"] for m in bystanders]
    placement = sc.wait_bound(plain, timeout=20, what="plain pods outside the reservation bound")
    on_reserved = {n: node for n, node in placement.items() if node in reserved_nodes}
    assert not on_reserved, f"plain pods landed on reserved nodes: {on_reserved}"

    sc.assert_unbound_for(["intruder"], 6,
                          what=f"plain pod that fits only on reserved {reservation[blocked]}")
    messages = sc.wait_for(
        "Quorum's 'capacity reserved' reason for the plain pod",
        lambda: [m for m in sc.scheduling_messages("intruder") if f"reserved for gang {sc.ns}/rack" in m],
        timeout=10)
    sc.record("intruder_reason", messages[-1][:300])
    still = sc.gang_debug("rack") or {}
    assert (still.get("reservation") or {}).get(blocked) == reservation[blocked], (
        f"the reservation ended during the observation ({time.monotonic() - started:.1f}s after it "
        f"was made), so the check above proves less than intended: {still}")

    sc.kube.admit_blocked()
    members = [f"rack-{i}" for i in range(size)]
    placement = sc.wait_bound(members, timeout=30, what="gang bound once the blocked member may schedule")
    assert {topo.rack_of(n) for n in placement.values()} == {rack}, f"gang left rack {rack}: {placement}"
    assert not sc.placement(["intruder"])["intruder"], "the plain pod took a node of the gang's rack"
    sc.delete(["intruder"])
    sc.finish()
