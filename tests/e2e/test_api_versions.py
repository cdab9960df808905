"""The native gang API of each Kubernetes version, through that version's kube-scheduler: the
v1alpha1 Workload of 1.35 (gangs named by ``spec.workloadRef``, one per podGroup and replica key)
and the v1alpha2 PodGroup of 1.36. (1.37's v1beta1 PodGroup is exercised by the whole suite.)
Each test runs only on its version (``k8s_minor``); the API-version suite runs them all.
"""

from __future__ import annotations

import pytest

from .conventions_support import (
    KUEUE,
    PODGROUP_V1ALPHA2,
    WORKLOAD_V1ALPHA1,
    all_but_last_wait,
    create_object,
    member,
)
from .scenario import Scenario

pytestmark = [pytest.mark.e2e, pytest.mark.api_suite]


@pytest.mark.k8s_minor(35)
def test_v1alpha1_workload_gang_binds_whole(scenario: Scenario) -> None:
    sc = scenario
    create_object(sc, WORKLOAD_V1ALPHA1, "train", {"podGroups": [
        {"name": "workers", "policy": {"gang": {"minCount": 4}}}]})
    pods = [member(sc, "train-workers", i, 4, gpus=2,
                   spec={"workloadRef": {"name": "train", "podGroup": "workers"}}) for i in range(4)]
    names = all_but_last_wait(sc, pods, "v1alpha1 Workload gang")
    sc.wait_bound(names, timeout=60, what="v1alpha1 Workload gang bound whole")
    kept = sc.pods_named(names[:1])[names[0]]["spec"].get("workloadRef")
    assert kept == {"name": "train", "podGroup": "workers"}, f"the apiserver dropped workloadRef: {kept}"
    sc.record("bind skew", sc.bind_skew(names))
    sc.finish()


@pytest.mark.k8s_minor(35)
def test_v1alpha1_replica_gangs_bind_independently_each_inside_one_rack(scenario: Scenario) -> None:
    """Three replicas of one podGroup (minCount 4, a rack's worth of GPUs each): each is a gang of
    its own. Replica 1 is one member short; replicas 0 and 2 bind without waiting for it, and it
    binds once complete. Each replica sits inside one rack (Kueue's required-topology annotation)."""
    sc, topo = scenario, scenario.topo
    per_pod = topo.gpus_per_node
    create_object(sc, WORKLOAD_V1ALPHA1, "job", {"podGroups": [
        {"name": "replica", "policy": {"gang": {"minCount": 4}}}]})

    def replica(key: str) -> list[str]:
        return [f"job-r{key}-{i}" for i in range(4)]

    in_a_rack = {KUEUE + "podset-required-topology": sc.settings.rack_label}
    pods = {key: [member(sc, f"job-r{key}", i, 4, gpus=per_pod, annotations=in_a_rack, spec={
        "workloadRef": {"name": "job", "podGroup": "replica", "podGroupReplicaKey": key}})
        for i in range(4)] for key in ("0", "1", "2")}
    sc.create(pods["0"] + pods["2"] + pods["1"][:3])
    placed = sc.wait_bound(replica("0") + replica("2"), timeout=60, what="replicas 0 and 2 bound")
    sc.assert_unbound_for(replica("1")[:3], 4, what="replica 1, one member short")
    sc.create(pods["1"][3:])
    placed.update(sc.wait_bound(replica("1"), timeout=60, what="replica 1 bound once complete"))
    for key in ("0", "1", "2"):
        racks, _ = sc.racks_and_blocks({n: placed[n] for n in replica(key)})
        assert len(racks) == 1, f"replica {key} spans racks {racks}"
    sc.finish()


@pytest.mark.k8s_minor(36)
def test_v1alpha2_podgroup_gang_binds_whole(scenario: Scenario) -> None:
    sc = scenario
    create_object(sc, PODGROUP_V1ALPHA2, "train", {"schedulingPolicy": {"gang": {"minCount": 4}}})
    pods = [member(sc, "train", i, 4, gpus=2, spec={"schedulingGroup": {"podGroupName": "train"}})
            for i in range(4)]
    names = all_but_last_wait(sc, pods, "v1alpha2 PodGroup gang")
    sc.wait_bound(names, timeout=60, what="v1alpha2 PodGroup gang bound whole")
    sc.record("bind skew", sc.bind_skew(names))
    events = [e for e in sc.kube.events(sc.ns) if (e.get("involvedObject") or {}).get("kind") == "PodGroup"
              and e.get("reason") == "Bound"]
    assert events, "Quorum's Bound Event on the v1alpha2 PodGroup"
    sc.finish()
