"""The fault injection the life-cycle tests rely on works on this cluster (kwok Stages, node helpers).

Plain pods only (no gang): this checks hack/kwok/stages.yaml and tests/e2e/lifecycle_support.py,
not Quorum. A cluster whose kwok runs other Stages (a kind cluster set up by hand) fails here first,
with the reason, instead of in a gang scenario.
"""

from __future__ import annotations

from typing import Any

import pytest

from .cluster import Topology
from .lifecycle_support import NodeFaults, evict, kwok_annotations, node_ready
from .scenario import Scenario

pytestmark = pytest.mark.e2e


def condition(pod: dict[str, Any], kind: str) -> str | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def test_kwok_pod_annotations_make_pods_never_ready_or_fail(scenario: Scenario) -> None:
    sc = scenario
    manifests = {name: sc.pod(name, gpus=1, role="plain") for name in ("never-ready", "fails", "plain")}
    manifests["never-ready"]["metadata"]["annotations"].update(kwok_annotations(never_ready=True))
    manifests["fails"]["metadata"]["annotations"].update(kwok_annotations(fail_after="2s"))
    sc.create(list(manifests.values()))

    def phases() -> dict[str, str]:
        return {n: str((p.get("status") or {}).get("phase")) for n, p in sc.pods().items()}

    sc.wait_for("the plain pod Ready and the never-ready pod Running", lambda: (
        condition(sc.pods().get("plain", {}), "Ready") == "True"
        and phases().get("never-ready") == "Running"), timeout=30)
    failed = sc.wait_for("the fail-after pod Failed", lambda: sc.pods_named(["fails"]).get("fails")
                         if phases().get("fails") == "Failed" else None, timeout=30)
    state = failed["status"]["containerStatuses"][0]["state"]
    assert state.get("terminated", {}).get("exitCode") == 1, f"fail-after: exit code 1 expected: {state}"
    never = sc.pods()["never-ready"]
    assert never["status"]["phase"] == "Running", f"never-ready left Running: {never['status']}"
    assert condition(never, "Ready") == "False" and condition(never, "ContainersReady") == "False", (
        f"never-ready became Ready: {never['status'].get('conditions')}")

    evict(sc.kube, sc.ns, "never-ready")
    sc.wait_for("the evicted never-ready pod gone", lambda: "never-ready" not in sc.pods(), timeout=30)
    sc.finish()


def test_deleted_and_not_ready_nodes_come_back_as_they_were(scenario: Scenario,
                                                            node_faults: NodeFaults) -> None:
    sc = scenario
    why = sc.topo.shortfall(nodes_per_rack=2)
    if why:
        pytest.skip(why)
    rack = next(iter(sc.topo.racks.values()))
    gone, sick = rack[0], rack[1]
    node_faults.make_not_ready([sick])
    node_faults.delete([gone])
    now = Topology.discover(sc.kube, sc.settings)
    assert gone not in now.nodes and sick not in now.nodes, f"faulty nodes still in the topology: {now.nodes}"

    node_faults.restore()
    assert all(node_ready(n) for n in sc.kube.nodes() if n["metadata"]["name"] in (gone, sick))
    restored = Topology.discover(sc.kube, sc.settings)
    assert restored.nodes == sc.topo.nodes, "restored nodes differ from the session's topology"
    sc.finish()
