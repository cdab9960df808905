"""PodGroup claims (``PodGroup.spec.resourceClaims``, Kubernetes 1.37 with ``DRAWorkloadResourceClaims``).

A PodGroup lists a ResourceClaim its members share; each member names it in its own
``spec.resourceClaims``. kube-scheduler allocates that claim once, for the PodGroup (``reservedFor``
a podgroup), from the devices of one node: every member using it can only run there. Quorum counts
its devices once for the gang and places the members on one node that holds them and the members.

kube-scheduler allocates PodGroup claims only with ``DRAWorkloadResourceClaims`` and
``GenericWorkload`` on (cluster-up turns the first on in the apiserver and the controller-manager);
this module restarts the suite's kube-scheduler with both and puts it back afterwards.

Without Quorum, kube-scheduler alone binds the first member, allocates the claim on its node, and
the members that do not fit beside it wait forever: a partial gang holding the devices.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .cluster import PODGROUP_API, Quorum
from .dra import (
    CLAIM,
    DRA_API_VERSION,
    DRA_GROUP,
    DRA_VERSION,
    DraDevices,
    allocated_devices,
    is_allocated,
    list_claims,
)
from .scenario import Scenario
from .scheduler_gates import Scheduler, scheduler_gates
from .test_dra import pick_nodes

pytestmark = pytest.mark.e2e

GATES = {"GenericWorkload": True, "DRAWorkloadResourceClaims": True}
DEVICES = 4  # per device node
UNFIT_WATCH_SECONDS = 15.0


@pytest.fixture(scope="module")
def podgroup_claims(quorum: Quorum) -> Iterator[Scheduler]:
    with scheduler_gates(GATES) as scheduler:
        yield scheduler


def shared_claim(sc: Scenario, dra: DraDevices, name: str, devices: int) -> None:
    exactly = {"deviceClassName": dra.device_class, "allocationMode": "ExactCount", "count": devices}
    body = {"apiVersion": DRA_API_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": sc.ns},
            "spec": {"devices": {"requests": [{"name": CLAIM, "exactly": exactly}]}}}
    sc.kube.custom.create_namespaced_custom_object(DRA_GROUP, DRA_VERSION, sc.ns, "resourceclaims", body,
                                                   _request_timeout=30)


def claim_ref(sc: Scenario, dra: DraDevices, by: str, devices: int) -> dict[str, str]:
    """The claim entry the PodGroup and its members share: a ResourceClaim made here ("name"), or
    the PodGroup's own claim, made by the controller-manager from a template ("template")."""
    if by == "name":
        shared_claim(sc, dra, "shared", devices)
        return {"name": CLAIM, "resourceClaimName": "shared"}
    return {"name": CLAIM, "resourceClaimTemplateName": dra.template(devices)}


def podgroup_with_claim(sc: Scenario, name: str, min_count: int, ref: dict[str, str]) -> dict[str, Any]:
    """A v1beta1 gang PodGroup listing the claim ``ref``; returns it as the apiserver kept it."""
    group, version, plural = PODGROUP_API
    body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": sc.ns},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}},
                     "resourceClaims": [ref]}}
    kept: dict[str, Any] = sc.kube.custom.create_namespaced_custom_object(group, version, sc.ns, plural, body,
                                                                          _request_timeout=30)
    assert kept["spec"].get("resourceClaims"), (
        f"the apiserver dropped PodGroup.spec.resourceClaims (its gate off?): {kept['spec']}")
    return kept


def members(sc: Scenario, group: str, size: int, ref: dict[str, str], cpu: str) -> list[str]:
    """``size`` members of PodGroup ``group`` naming its claim exactly as the PodGroup does."""
    pods = []
    for i in range(size):
        pod = sc.pod(f"{group}-{i}", gpus=0, cpu=cpu, pod_group=group)
        pod["spec"]["resourceClaims"] = [dict(ref)]
        pod["spec"]["containers"][0].setdefault("resources", {})["claims"] = [{"name": CLAIM}]
        pods.append(pod)
    return sc.create(pods)


def group_claim(sc: Scenario) -> dict[str, Any] | None:
    """The namespace's one claim, the PodGroup's (None until it exists); more than one fails."""
    claims = list_claims(sc.kube, sc.ns)
    if len(claims) > 1:
        sc.fail(f"one claim for the whole PodGroup, found {[c['metadata']['name'] for c in claims]}")
    return claims[0] if claims else None


@pytest.mark.parametrize("by", ["name", "template"])
def test_a_gang_sharing_a_podgroup_claim_binds_whole_on_the_node_holding_its_devices(
        podgroup_claims: Scheduler, scenario: Scenario, dra: DraDevices, by: str) -> None:
    sc = scenario
    nodes = pick_nodes(sc, 2)
    dra.add_nodes(nodes, DEVICES)
    ref = claim_ref(sc, dra, by, DEVICES)
    podgroup_with_claim(sc, "trainer", 3, ref)
    names = members(sc, "trainer", 3, ref, cpu="8")
    placed = sc.wait_bound(names, timeout=60, what="the 3 members of PodGroup 'trainer'")
    claim = sc.wait_for("the PodGroup claim allocated",
                        lambda: (c if (c := group_claim(sc)) and is_allocated(c) else None), timeout=15)
    used = {pool for _, pool, _ in allocated_devices(claim)}
    reserved = [(r.get("resource"), r.get("name")) for r in claim["status"].get("reservedFor") or []]
    sc.record("placement", {"nodes": sorted(set(placed.values())), "claim_on": sorted(used),
                            "reserved_for": reserved})
    assert len(set(placed.values())) == 1 and set(placed.values()) == used, (
        f"every member must run on the node of the claim's devices: {placed}, devices on {used}")
    assert reserved == [("podgroups", "trainer")], f"the claim must be reserved for the PodGroup: {reserved}"
    group_claim(sc)  # still one claim
    sc.finish()


def test_a_gang_whose_podgroup_claim_cannot_be_satisfied_binds_nothing_and_says_why(
        podgroup_claims: Scheduler, scenario: Scenario, dra: DraDevices) -> None:
    """Each member fits any device node alone (kube-scheduler's filters pass them), but the claim
    puts them all on one node and no node holds the three: 3 x 40 cpu on nodes of 64."""
    sc = scenario
    nodes = pick_nodes(sc, 2)
    dra.add_nodes(nodes, DEVICES)
    ref = claim_ref(sc, dra, "name", DEVICES)
    podgroup_with_claim(sc, "toobig", 3, ref)
    names = members(sc, "toobig", 3, ref, cpu="40")
    sc.assert_unbound_for(names, UNFIT_WATCH_SECONDS,
                          what="members of PodGroup 'toobig' (3 x 40 cpu, on one node)")
    claim = group_claim(sc)
    assert claim is not None and not is_allocated(claim), f"the claim must stay free: {claim}"
    why = f"gang {sc.ns}/toobig shares ResourceClaim {sc.ns}/shared among its members, so all 3"
    debug = sc.wait_for(
        "Quorum's reason naming the shared claim",
        lambda: (d if why in str((d := sc.gang_debug("toobig") or {}).get("reason")) else None), timeout=15)
    sc.record("reason", str(debug.get("reason"))[:300])
    assert "must run on one node; the best candidate node holds 1" in str(debug.get("reason")), debug
    sc.finish()
