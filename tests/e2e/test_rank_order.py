"""Ranks close together: an Indexed Job's consecutive completion indexes on the same or the next node.

kube-scheduler filters the members in whatever order its queue holds them, and the Job's pod names
(``<job>-<index>-<suffix>``) sort ``10`` before ``2``: packing members in either order would scatter
neighbouring ranks over the rack. Quorum hands the placement's slots out in rank order instead.
"""

from __future__ import annotations

import pytest

from .lifecycle_support import job_pods, live_bound, start_gang
from .scenario import Scenario, node_of

pytestmark = pytest.mark.e2e

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def completion_index(pod: dict[str, object]) -> int:
    meta = pod["metadata"]
    assert isinstance(meta, dict)
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return int(labels.get(COMPLETION_INDEX) or annotations[COMPLETION_INDEX])


def test_consecutive_indexes_land_on_the_same_or_the_next_node_of_the_rack(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=3, gpus_per_node=4)
    if why:
        pytest.skip(why)
    per_pod = topo.gpus_per_node // 4
    size = 4 * topo.nodes_per_rack  # a whole rack, four members per node: 16 on the default cluster
    start_gang(sc, "ranks", size, per_pod, rack=True)
    sc.wait_for("the gang bound", lambda: live_bound(sc, "ranks", size), timeout=90)

    by_index = {completion_index(p): node_of(p) for p in job_pods(sc.kube, sc.ns, "ranks")}
    problem = ranks_apart(sc, by_index, size)
    assert not problem, problem
    sc.finish()


def ranks_apart(sc: Scenario, by_index: dict[int, str], size: int) -> str:
    """Why the placement by completion index does not keep ranks together in one rack ("" if it
    does): consecutive indexes on the same node or the next node of the rack, one run per node."""
    topo = sc.topo
    if sorted(by_index) != list(range(size)):
        return f"indexes missing: {by_index}"
    racks = {topo.rack_of(node) for node in by_index.values()}
    if len(racks) != 1:
        return f"the gang asks for one rack: {by_index}"
    order = topo.racks[racks.pop()]  # the rack's node names, sorted
    steps = [order.index(by_index[i + 1]) - order.index(by_index[i]) for i in range(size - 1)]
    placement = [f"{i}:{by_index[i]}" for i in range(size)]
    if not all(step in (0, 1) for step in steps):
        return f"consecutive indexes should share a node or go to the next node of the rack: {placement}"
    if sum(steps) != len(set(by_index.values())) - 1:
        return f"each node should hold one run of ranks: {placement}"
    return ""
