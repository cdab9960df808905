"""CompositePodGroups (``scheduling.k8s.io/v1alpha3``, alpha gate ``CompositePodGroup``, 1.37): a gang
of PodGroups binds whole, inside the composite's required block, each PodGroup inside its own rack;
none of it binds while one PodGroup cannot fit; the composite and its PodGroups carry the
conditions. ``hack/cluster-up.sh`` turns the gate and the API version on for 1.37.
"""

from __future__ import annotations

import pytest

from .cluster import PODGROUP_API
from .scenario import Scenario

pytestmark = [pytest.mark.e2e, pytest.mark.k8s_minor(37)]

COMPOSITE_API = ("scheduling.k8s.io", "v1alpha3", "compositepodgroups")
WORKLOAD = "train"  # the Workload the objects name: 1.37 requires the reference, not the object


def create_composite(sc: Scenario, name: str, min_groups: int, block_label: str) -> None:
    group, version, plural = COMPOSITE_API
    body = {"apiVersion": f"{group}/{version}", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": sc.ns},
            "spec": {"workloadRef": {"workloadName": WORKLOAD, "templateName": "root"},
                     "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
                     "schedulingConstraints": {"topology": [{"key": block_label}]}}}
    sc.kube.custom.create_namespaced_custom_object(group, version, sc.ns, plural, body, _request_timeout=30)


def create_child(sc: Scenario, name: str, parent: str, min_count: int) -> None:
    group, version, plural = PODGROUP_API
    body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": sc.ns},
            "spec": {"parentCompositePodGroupName": parent,
                     "workloadRef": {"workloadName": WORKLOAD, "templateName": name},
                     "schedulingPolicy": {"gang": {"minCount": min_count}},
                     "schedulingConstraints": {"topology": [{"key": sc.settings.rack_label}]}}}
    sc.kube.custom.create_namespaced_custom_object(group, version, sc.ns, plural, body, _request_timeout=30)


def members(sc: Scenario, group: str, count: int) -> list[str]:
    """``count`` pods of PodGroup ``group``, a whole node each."""
    gpus = sc.topo.gpus_per_node
    return sc.create([sc.pod(f"{group}-{i}", gpus=gpus, pod_group=group) for i in range(count)])


def conditions(sc: Scenario, api: tuple[str, str, str], name: str) -> dict[str, str]:
    obj = sc.kube.custom.get_namespaced_custom_object(api[0], api[1], sc.ns, api[2], name)
    assert isinstance(obj, dict)
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or ()}


def rack_size(sc: Scenario) -> int:
    """Nodes per rack; the scenarios need two racks of two nodes or more in a block."""
    short = sc.topo.shortfall(racks_per_block=2, nodes_per_rack=2)
    if short:
        pytest.skip(short)
    return sc.topo.nodes_per_rack


def test_a_composite_of_two_podgroups_binds_whole_in_one_block_each_podgroup_in_one_rack(
        scenario: Scenario) -> None:
    sc = scenario
    size = rack_size(sc)
    create_composite(sc, "train", 2, sc.settings.block_label)
    create_child(sc, "train-a", "train", size)
    create_child(sc, "train-b", "train", size)
    names = members(sc, "train-a", size) + members(sc, "train-b", size)
    placed = sc.wait_bound(names, timeout=90, what="composite train")
    racks, blocks = sc.racks_and_blocks(placed)
    assert len(blocks) == 1, placed
    assert len(racks) == 2, placed
    for group in ("train-a", "train-b"):
        assert len({sc.topo.rack_of(placed[n]) for n in names if n.startswith(group)}) == 1, placed
    debug = sc.gang_debug("composite:train")
    assert debug is not None, sc.diag()
    assert [p["podGroup"] for p in debug["parts"]] == [f"{sc.ns}/train-a", f"{sc.ns}/train-b"], debug
    sc.wait_for("conditions on the composite and its PodGroups", lambda: (
        conditions(sc, COMPOSITE_API, "train").get("CompositePodGroupInitiallyScheduled") == "True"
        and all(conditions(sc, PODGROUP_API, g).get("PodGroupInitiallyScheduled") == "True"
                for g in ("train-a", "train-b"))), timeout=30)
    sc.finish()


def test_no_member_of_a_composite_binds_while_one_podgroup_cannot_fit(scenario: Scenario) -> None:
    """PodGroup b asks for one whole node more than any rack has: a fits, yet nothing binds; once b
    asks for a rack's worth (minCount is mutable) and its extra member goes, the composite binds."""
    sc = scenario
    size = rack_size(sc)
    create_composite(sc, "job", 2, sc.settings.block_label)
    create_child(sc, "job-a", "job", size)
    create_child(sc, "job-b", "job", size + 1)
    a = members(sc, "job-a", size)
    b = members(sc, "job-b", size + 1)
    sc.assert_unbound_for(a + b, 10, what="composite job while PodGroup job-b fits no rack")
    reason = (sc.gang_debug("composite:job") or {}).get("reason", "")
    assert "PodGroup job-b" in reason, reason
    group, version, plural = PODGROUP_API
    smaller = {"spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}
    sc.kube.custom.patch_namespaced_custom_object(group, version, sc.ns, plural, "job-b", smaller)
    sc.watcher.min_count_changed("job-b")
    sc.delete([b[-1]])
    placed = sc.wait_bound(a + b[:-1], timeout=90, what="composite job once job-b fits")
    assert len(sc.racks_and_blocks(placed)[1]) == 1, placed
    sc.finish()
