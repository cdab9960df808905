"""Jobs whose PodGroup the Job controller writes (``WorkloadWithJob``, alpha in 1.37).

Run on a cluster started with ``hack/cluster-up.sh --job-workloads``: the real kube-controller-manager
writes a v1beta1 Workload and PodGroup for every Job whose template names none, and points each pod's
``spec.schedulingGroup`` at it. The PodGroup is a gang when the Job's ``spec.scheduling`` asks for
one, and ``basic`` otherwise.

- A Job that asks for a gang (minCount, required rack) binds whole inside one rack, or not at all.
- A Job that asks for nothing but carries Quorum's annotations keeps its gang: its basic PodGroup
  does not turn it into pods scheduled one by one (``cluster/basic_groups.py``).

In each case one node of the first rack is taken, so a gang of a whole rack fits only in the other
and pods placed one by one would spread over both.
"""

from __future__ import annotations

from typing import Any

import pytest

from .lifecycle_support import job_manifest, job_pods, live_bound
from .scenario import Scenario

pytestmark = pytest.mark.job_workloads


def prepared(sc: Scenario) -> tuple[int, int]:
    """(rack size, GPUs per node) once one node of the first rack is taken."""
    topo = sc.topo
    racks = list(topo.racks)
    if len(racks) < 2 or topo.shortfall(nodes_per_rack=2):
        pytest.skip("needs two racks of two or more nodes")
    sc.blockers([topo.racks[racks[0]][0]], gpus=topo.gpus_per_node)
    return len(topo.racks[racks[1]]), topo.gpus_per_node


def gang_job(sc: Scenario, name: str, size: int, gpus: int) -> dict[str, Any]:
    job = job_manifest(sc.settings, name, size, gpus=gpus)
    job["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": size}},
                                 "schedulingConstraints": {"topology": [{"key": sc.settings.rack_label}]}}
    return job


def annotated_job(sc: Scenario, name: str, size: int, gpus: int) -> dict[str, Any]:
    return job_manifest(sc.settings, name, size, gpus=gpus, gang=name, required=sc.settings.rack_label)


def written_podgroup(sc: Scenario, job: str, size: int) -> dict[str, Any]:
    """The PodGroup the Job controller wrote and named in every pod of the Job."""
    pods = sc.wait_for(f"{size} pods of Job {job}", lambda: job_pods(sc.kube, sc.ns, job)
                       if len(job_pods(sc.kube, sc.ns, job)) == size else None, timeout=60)
    groups = {(p["spec"].get("schedulingGroup") or {}).get("podGroupName") for p in pods}
    assert len(groups) == 1 and None not in groups, f"pods of Job {job} name {groups}"
    group = sc.kube.podgroup(sc.ns, groups.pop())
    assert group is not None, f"the PodGroup of Job {job} is missing"
    owners = [o.get("kind") for o in group["metadata"].get("ownerReferences", [])]
    assert "Workload" in owners or "Job" in owners, group["metadata"]
    return group


@pytest.mark.parametrize("declared", ["job-spec", "annotations"])
def test_a_job_gang_binds_whole_in_the_one_rack_that_holds_it(scenario: Scenario, declared: str) -> None:
    sc = scenario
    size, gpus = prepared(sc)
    make = gang_job if declared == "job-spec" else annotated_job
    sc.kube.create_job(sc.ns, make(sc, "whole", size, gpus))
    group = written_podgroup(sc, "whole", size)
    policy = group["spec"].get("schedulingPolicy") or {}
    assert ("gang" in policy) == (declared == "job-spec"), policy
    placed = sc.wait_for("the Job's gang bound", lambda: live_bound(sc, "whole", size), timeout=60)
    racks = {sc.topo.rack_of(node) for node in placed.values()}
    assert racks == {list(sc.topo.racks)[1]}, placed
    sc.finish()


@pytest.mark.parametrize("declared", ["job-spec", "annotations"])
def test_a_job_gang_no_rack_holds_binds_nothing(scenario: Scenario, declared: str) -> None:
    sc = scenario
    size, gpus = prepared(sc)
    make = gang_job if declared == "job-spec" else annotated_job
    sc.kube.create_job(sc.ns, make(sc, "toobig", size + 1, gpus))
    written_podgroup(sc, "toobig", size + 1)
    names = [p["metadata"]["name"] for p in job_pods(sc.kube, sc.ns, "toobig")]
    sc.assert_unbound_for(names, 15, what=f"a gang of {size + 1} whole nodes, racks of {size}")
    sc.finish()
