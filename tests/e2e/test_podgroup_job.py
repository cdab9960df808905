"""A native gang: a batch/v1 Job whose pods reference a scheduling.k8s.io/v1beta1 PodGroup.

kube-controller-manager creates the pods; Quorum reads minCount and the topology constraint from the
PodGroup. Without Quorum the pods would bind one by one as the Job controller creates them, spread
over racks.
"""

from __future__ import annotations

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_job_pods_of_a_podgroup_bind_together_in_one_rack(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    why = topo.shortfall(nodes_per_rack=2)
    if why:
        pytest.skip(why)
    per_pod = max(1, topo.gpus_per_node // 2)
    pods = min(6, topo.rack_gpus // per_pod)  # default cluster: 6 x 4 GPUs, fits in a rack of 32
    sc.kube.create_podgroup(sc.ns, "trainer", pods, topology_key=settings.rack_label)

    pod = sc.pod("unused", gpus=per_pod, pod_group="trainer")
    template = {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": pod["spec"]}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "trainer"},
        "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": template},
    }
    sc.kube.create_job(sc.ns, job)

    def created() -> list[str] | None:
        names = sorted(sc.gang_pods("trainer"))
        return names if len(names) >= pods else None

    names = sc.wait_for(f"the Job controller to create {pods} pods", created, timeout=30)
    placement = sc.wait_bound(names, timeout=60, what=f"all {pods} Job pods bound")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1, f"the PodGroup's topology constraint asks for one rack: {placement}"
    debug = sc.gang_debug("trainer") or {}
    assert debug.get("minCount") == pods and "PodGroup" in str(debug.get("source")), (
        f"Quorum should read the gang from the PodGroup: {debug}")
    sc.record("bind_skew", sc.bind_skew(names))
    sc.finish()
