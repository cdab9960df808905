"""A reservation meets a pod Quorum never saw coming: another scheduler's pod (``spec.nodeName``)
takes the capacity a held gang had reserved. The reservation cannot hold any more, so Quorum
releases it at once and the gang is re-planned around the taken node; it binds whole once its
blocked member may schedule, and is never left partly bound (the scenario's watcher checks that).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def held_on(sc: Scenario, gang: str, held: int) -> dict[str, Any] | None:
    entry = sc.gang_debug(gang)
    if entry and entry.get("phase") == "Binding" and len(entry.get("held") or []) == held:
        return entry
    return None


def test_another_schedulers_pod_on_a_reserved_node_moves_the_gang_elsewhere(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=2) or (None if len(topo.racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    size, gpn = topo.nodes_per_rack, topo.gpus_per_node
    blocked = f"rack-{size - 1}"
    members = [f"rack-{i}" for i in range(size)]
    # Whole-node members in one rack: one node taken there leaves the rack too small for the gang.
    sc.gang("rack", size, gpus=gpn, required="rack", blocked=[size - 1])
    entry = sc.wait_for(f"{size - 1} members of 'rack' held at bind", lambda: held_on(sc, "rack", size - 1),
                        timeout=20, interval=0.1)
    reservation: dict[str, str] = entry["reservation"]
    taken = reservation[blocked]
    first_rack = topo.rack_of(taken)

    # Another scheduler's pod, bound directly to the node reserved for the blocked member.
    started = time.monotonic()
    sc.blockers([taken], gpus=gpn, prefix="foreign", scheduler_name="other-scheduler")

    def released() -> dict[str, Any] | None:
        now = sc.gang_debug("rack") or {}
        return now if taken not in (now.get("reservation") or {}).values() else None

    gone = sc.wait_for(f"the reservation on {taken} released", released, timeout=10, interval=0.1)
    sc.record("released_after_foreign_pod_seconds", round(time.monotonic() - started, 2))
    assert not {n: node for n, node in sc.placement(members).items() if node}, (
        f"no member may be bound while the gang is re-planned: {gone}")

    again = sc.wait_for("'rack' re-planned and held again, away from the taken node",
                        lambda: held_on(sc, "rack", size - 1), timeout=30, interval=0.1)
    moved: dict[str, str] = again["reservation"]
    assert taken not in moved.values(), f"the new reservation still uses {taken}: {again}"
    assert {topo.rack_of(n) for n in moved.values()} != {first_rack}, (
        f"rack {first_rack} has only {size - 1} free nodes left, the gang must move: {again}")
    sc.record("replanned_after_foreign_pod_seconds", round(time.monotonic() - started, 2))

    sc.kube.admit_blocked()
    placement = sc.wait_bound(members, timeout=30, what="'rack' bound once its blocked member may schedule")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1 and taken not in placement.values(), f"gang 'rack' bound to {placement}"
    assert set(placement.values()) == set(moved.values()), (
        f"the gang must bind on the nodes it was re-planned to {sorted(moved.values())}: {placement}")
    sc.finish()
