"""kube-scheduler's per-pod preemption must not destroy work for a gang that still cannot fit.

A high-priority gang whose required rack is too small for it will never bind. kube-scheduler's own
preemption sees only one member at a time: without Quorum's whole-gang check it evicts the plain
pods holding the GPUs, member by member, and the gang still binds nothing.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from .cluster import Kube
from .scenario import Scenario

pytestmark = pytest.mark.e2e

HIGH = "quorum-e2e-high"


@pytest.fixture
def high_priority(kube: Kube) -> str:
    api = client.SchedulingV1Api(kube.api)
    body = client.V1PriorityClass(metadata=client.V1ObjectMeta(name=HIGH), value=1000,
                                  description="e2e: a gang that may preempt")
    try:
        api.create_priority_class(body, _request_timeout=30)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    return HIGH


def test_a_gang_that_cannot_fit_even_by_preemption_evicts_nothing(scenario: Scenario,
                                                                  high_priority: str) -> None:
    sc, topo = scenario, scenario.topo
    rack = next(iter(topo.racks))
    nodes = topo.racks[rack]
    blockers = sc.blockers(nodes, gpus=topo.gpus_per_node)  # every GPU of one rack, priority 0
    # One member more than the rack has nodes, each a whole node: no rack can ever hold it.
    size = len(nodes) + 1
    members = sc.gang("huge", size, gpus=topo.gpus_per_node, required="rack", create=False)
    for manifest in members:
        manifest["spec"]["priorityClassName"] = high_priority
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
