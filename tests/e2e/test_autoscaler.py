"""Gangs on an autoscaled cluster: a real cluster-autoscaler (kwok provider) adds the nodes.

Runs on a cluster started with ``hack/cluster-up.sh --autoscaler --nodes 0 --blocks 1 --racks 2``
and ``AUTOSCALER_MAX=6`` (as ``hack/test-all.sh`` does): no GPU node at the start, two rack node
groups of at most 6 nodes. Selected with ``-m autoscaler``
(``hack/test-all.sh`` runs it after the main suite). The autoscaler's simulation runs only the
in-tree plugins and never asks Quorum; Quorum's bind hold is what keeps members from binding before
the gang's last node exists.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from .booting import Booter
from .cluster import Kube, Quorum, Settings, Topology
from .conftest import scenario_in
from .lifecycle_support import create_podgroup, job_manifest, job_pods
from .reconfigure import Reconfigurer
from .scenario import Scenario

pytestmark = pytest.mark.autoscaler

GROUP_LABEL = "autoscaling.quorum.dev/node-group"
GPUS_PER_NODE = 8  # hack/autoscaler-up.sh's node groups, as the static nodes (NODE_GPUS)
DEADLOCK_WATCH_SECONDS = 25.0  # five of the autoscaler's scan intervals (5 s here)
BIND_BOUND_SECONDS = 120.0  # split scale-up, Quorum's request, the autoscaler's answer, the nodes
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
UNNEEDED_SECONDS = 15.0  # the local autoscaler's --scale-down-unneeded-time
SLOW_BOOT_SECONDS = 30.0  # the late nodes of (e) boot this long after they were made


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def autoscaled_nodes(kube: Kube) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in kube.nodes()
            if GROUP_LABEL in (n["metadata"].get("labels") or {})}


@pytest.fixture(scope="module", autouse=True)
def booter(kube: Kube) -> Iterator[Booter]:
    """Boots the autoscaler's nodes (removes their startup taint): at once, unless a test plans
    otherwise."""
    boots = Booter(kube)
    try:
        yield boots
    finally:
        boots.stop()


@pytest.fixture
def autoscaled(request: pytest.FixtureRequest, kube: Kube, quorum: Quorum,
               settings: Settings) -> Iterator[Scenario]:
    """A scenario on the autoscaled cluster, the topology left empty (the nodes come and go with
    the autoscaler)."""
    yield from scenario_in(request, kube, quorum, settings, Topology({}))


def test_a_jobset_like_gang_from_zero_gpu_nodes_gets_its_nodes_and_binds_whole(
        autoscaled: Scenario, booter: Booter) -> None:
    """Three Jobs, one PodGroup, 4 pods of a whole node each, and no GPU node at the start. The new
    nodes boot 3 s apart, as a cloud's join one by one: no member binds before the last one."""
    sc = autoscaled
    gpus = GPUS_PER_NODE
    # Nodes of an earlier scenario go once unneeded for 15 s (the local autoscaler's setting).
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    booter.plan([0.0, 3.0, 6.0, 9.0])
    create_podgroup(sc.kube, sc.ns, "jobset", 4, rack_label=None, annotations={})
    jobs = {"driver": 1, "workers-a": 2, "workers-b": 1}
    created = time.time()
    for name, size in jobs.items():
        sc.kube.create_job(sc.ns, job_manifest(sc.settings, name, size, gpus=gpus, pod_group="jobset"))
    names = sc.wait_for("the Jobs' 4 pods", lambda: (pods := [p["metadata"]["name"] for job in jobs
                                                                for p in job_pods(sc.kube, sc.ns, job)])
                        and len(pods) == 4 and pods, timeout=30)
    placement = sc.wait_bound(names, timeout=180, what="the gang bound on nodes the autoscaler added")
    nodes = autoscaled_nodes(sc.kube)
    used = {node: nodes[node] for node in set(placement.values())}
    assert len(used) == 4 and all(node in nodes for node in placement.values()), (
        f"one autoscaled node per member: {placement}")
    # When each node could take pods: its boot (the booter's clock), or its creation if it never
    # carried the startup taint.
    usable = {node: booter.booted.get(node, stamp(n["metadata"]["creationTimestamp"]))
              for node, n in used.items()}
    last_node = max(usable.values())
    pods = sc.pods_named(names)
    bound_at = {name: stamp(next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                                 if c["type"] == "PodScheduled" and c["status"] == "True"))
                for name, pod in pods.items()}
    # PodScheduled times have 1 s resolution: a bind before the last node shows as earlier by > 1 s.
    early = {name: round(last_node - t, 1) for name, t in bound_at.items() if t < last_node - 1.0}
    assert not early, f"members bound before the last of the gang's nodes booted (seconds early): {early}"
    sc.record("first_to_last_node_booted_seconds", round(last_node - min(usable.values()), 1))
    sc.record("bind_skew", sc.bind_skew(names))
    sc.record("nodes_by_group", sorted(nodes[n]["metadata"]["labels"][GROUP_LABEL] for n in used))
    sc.record("created_to_all_bound_seconds", round(max(bound_at.values()) - created, 1))
    sc.finish()


def provisioning_requests(sc: Scenario) -> list[dict[str, Any]]:
    found = sc.kube.custom.list_namespaced_custom_object("autoscaling.x-k8s.io", "v1", sc.ns,
                                                         "provisioningrequests", _request_timeout=30)
    return list(found.get("items") or [])


@pytest.fixture
def static_nodes(kube: Kube) -> Iterator[list[str]]:
    """Two kwok GPU nodes in each rack, outside every node group: a required-rack gang of 4 whole
    nodes fits in no rack, while the autoscaler's simulation places its pods on these free nodes
    (2 + 2) and so adds nothing. That is the deadlock, made deterministic: without Quorum's
    request nothing ever changes."""
    names = []
    for rack in ("b0-r0", "b0-r1"):
        for i in range(2):
            name = f"static-{rack}-{i}"
            resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(GPUS_PER_NODE)}
            kube.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"type": "kwok", "kubernetes.io/hostname": name, "topology.quorum.dev/block": "b0",
                           "topology.quorum.dev/rack": rack}},
                "status": {"capacity": resources, "allocatable": resources}}, _request_timeout=30)
            names.append(name)
    try:
        yield names
    finally:
        for name in names:
            kube.core.delete_node(name, _request_timeout=30)


def test_b_a_required_rack_gang_the_autoscaler_believes_placed_binds_whole_in_one_rack(
        autoscaled: Scenario, static_nodes: list[str], reconfigure: Reconfigurer) -> None:
    """Two free nodes in each of two racks, a gang of 4 whole nodes that requires one rack. The
    autoscaler's simulation (in-tree plugins only, never Quorum) places the pods 2 + 2 and adds
    nothing; Quorum finds no rack. Without Quorum's scale-up request that is a deadlock. With it,
    Quorum asks for room for the 2 missing members in one rack, and the gang binds whole there."""
    sc = autoscaled
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    reconfigure.apply({"autoscaling": {"provisioningRequests": False}})
    stuck = [m["metadata"]["name"] for m in sc.gang("stuck", 4, gpus=GPUS_PER_NODE, required="rack")]
    sc.assert_unbound_for(stuck, DEADLOCK_WATCH_SECONDS, what="the required-rack gang, no scale-up requests")
    added = autoscaled_nodes(sc.kube)
    assert not added, f"the autoscaler added nodes ({sorted(added)}): no deadlock shown"
    reason = str((sc.gang_debug("stuck") or {}).get("reason"))[:200]
    assert "best rack fits 2" in reason, reason
    sc.record("without_scale_up_requests", {"nodes_added": 0, "reason": reason})
    sc.watcher.retire("stuck")
    sc.delete(stuck)
    reconfigure.restore()

    created = time.monotonic()
    whole = [m["metadata"]["name"] for m in sc.gang("whole", 4, gpus=GPUS_PER_NODE, required="rack")]
    placement = sc.wait_bound(whole, timeout=BIND_BOUND_SECONDS, what="the required-rack gang bound whole")
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in sc.kube.nodes()}
    racks = {labels[node]["topology.quorum.dev/rack"] for node in placement.values()}
    assert len(racks) == 1, f"the gang must be inside one rack: {placement}"
    added = autoscaled_nodes(sc.kube)
    sc.record("with_scale_up_requests", {"bound_after_seconds": round(time.monotonic() - created, 1),
                                         "rack": racks.pop(), "nodes_added": len(added),
                                         "bind_skew": sc.bind_skew(whole)})
    sc.wait_for("Quorum's ProvisioningRequest deleted once the gang bound",
                lambda: not provisioning_requests(sc), timeout=30)
    sc.finish()


def consuming_gang(sc: Scenario, name: str, size: int) -> list[str]:
    """A required-rack gang of whole GPU nodes whose pods consume the request "<name>-capacity": the
    autoscaler leaves their room to that request, which Quorum makes."""
    manifests = sc.gang(name, size, gpus=GPUS_PER_NODE, required="rack", create=False)
    for manifest in manifests:
        manifest["metadata"].setdefault("annotations", {})[CONSUME] = f"{name}-capacity"
    return sc.create(manifests)


def quorum_podtemplates(sc: Scenario) -> list[str]:
    found = sc.kube.core.list_namespaced_pod_template(
        sc.ns, label_selector="app.kubernetes.io/managed-by=quorum", _request_timeout=30)
    return [t.metadata.name for t in found.items]


def test_d_a_gang_deleted_while_its_capacity_is_provisioned_leaves_nothing_behind(
        autoscaled: Scenario, static_nodes: list[str], booter: Booter) -> None:
    """The gang's pods go while Quorum's request is out and its nodes are still booting (three of
    the four boot 20 s after they were made; the pods consume the request, so the autoscaler adds
    nodes only through it): the request and its PodTemplate are deleted, and the autoscaler removes
    the nodes it added once they are unneeded (15 s here)."""
    sc = autoscaled
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    booter.plan([0.0, 20.0, 20.0, 20.0])
    names = consuming_gang(sc, "gone", 4)
    sc.wait_for("Quorum's ProvisioningRequest provisioned", lambda: any(
        c.get("type") == "Provisioned" and c.get("status") == "True"
        for r in provisioning_requests(sc) for c in (r.get("status") or {}).get("conditions") or ()),
        timeout=60, interval=0.1)
    # 2 or 4: the autoscaler may or may not count the rack's 2 free nodes against the request.
    added = sc.wait_for("the nodes it added", lambda: len(n := autoscaled_nodes(sc.kube)) >= 2 and n,
                        timeout=30, interval=0.2)
    bound = sorted(n for n, node in sc.placement(names).items() if node)
    assert not bound, f"members bound before the gang's last node booted: {bound}"
    sc.watcher.retire("gone")
    sc.delete(names)
    deleted = time.monotonic()
    sc.wait_for("the request deleted", lambda: not provisioning_requests(sc), timeout=30)
    sc.wait_for("its PodTemplate deleted", lambda: not quorum_podtemplates(sc), timeout=30)
    sc.wait_for("the added nodes scaled down", lambda: not autoscaled_nodes(sc.kube), timeout=180, interval=2)
    sc.record("deleted_to_no_nodes_seconds", round(time.monotonic() - deleted, 1))
    sc.record("nodes_added", len(added))
    sc.finish()


def test_c_a_gang_that_cannot_fit_at_the_groups_max_gets_nothing_provisioned(
        autoscaled: Scenario, static_nodes: list[str]) -> None:
    """9 whole nodes in one rack; each rack has 2 free nodes and a node group of at most 6: no rack
    can ever hold it. Quorum asks each rack in turn for 7 and is refused; no node is added, no request
    stays, and the reason names the refusals."""
    sc = autoscaled
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    seen: set[str] = set()

    def refused_everywhere() -> str | None:
        seen.update(autoscaled_nodes(sc.kube))
        reason = str((sc.gang_debug("huge") or {}).get("reason") or "")
        return reason if "the autoscaler cannot add it in any rack" in reason else None

    names = consuming_gang(sc, "huge", 9)
    created = time.monotonic()
    reason = sc.wait_for("the reason naming both racks' refusals", refused_everywhere, timeout=90,
                         interval=0.5)
    refused_after = round(time.monotonic() - created, 1)
    assert "b0-r0:" in reason and "b0-r1:" in reason and "CapacityIsNotFound" in reason, reason
    sc.assert_unbound_for(names, DEADLOCK_WATCH_SECONDS, what="the gang that fits nowhere")
    seen.update(autoscaled_nodes(sc.kube))
    assert not seen, f"nodes were provisioned for a gang that cannot fit: {sorted(seen)}"
    assert not provisioning_requests(sc), "a refused request was left behind"
    sc.record("refused_everywhere_after_seconds", refused_after)
    sc.record("reason", reason[:300])
    sc.watcher.retire("huge")
    sc.delete(names)
    sc.finish()


def test_e_nodes_that_boot_slowly_are_kept_and_the_gang_binds_whole_once_the_last_boots(
        autoscaled: Scenario, booter: Booter) -> None:
    """From zero nodes, a required-rack gang of 4 whole nodes whose pods consume Quorum's request
    (no rack is known yet: the request keeps its pods in one, by pod affinity). Two of the new nodes
    boot at once, the other two 30 s later (the autoscaler removes nodes unneeded for 15 s). The
    early nodes stay, nothing binds before the last node boots, and the gang binds whole."""
    sc = autoscaled
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    booter.plan([0.0, 0.0, SLOW_BOOT_SECONDS, SLOW_BOOT_SECONDS])
    names = consuming_gang(sc, "slow", 4)
    four = sc.wait_for("the 4 nodes Quorum asked for", lambda: len(nodes := autoscaled_nodes(sc.kube)) >= 4
                       and nodes, timeout=90, interval=0.2)
    assert set(four) <= booter.tainted_seen or sc.wait_for(
        "the new nodes seen booting", lambda: set(four) <= booter.tainted_seen, timeout=10), (
        "the autoscaler's nodes carry no startup taint: start the cluster with AUTOSCALER_BOOTING=1")
    early = sorted(sc.wait_for("two nodes booted",
                               lambda: len(b := [n for n in four if n in booter.booted]) >= 2 and b,
                               timeout=30, interval=0.2))
    early_at = max(booter.booted[n] for n in early)
    vanished: set[str] = set()

    def all_booted() -> bool:
        present = autoscaled_nodes(sc.kube)
        vanished.update(n for n in early if n not in present)
        return all(n in booter.booted for n in four)

    sc.wait_for("the late nodes booted", all_booted, timeout=SLOW_BOOT_SECONDS + 60, interval=1)
    last_at = max(booter.booted[n] for n in four)
    assert last_at - early_at > UNNEEDED_SECONDS, "the late nodes came too soon to show anything"
    assert not vanished, f"the autoscaler removed early nodes while the gang waited: {sorted(vanished)}"
    placement = sc.wait_bound(names, timeout=60, what="the gang bound once its last node booted")
    pods = sc.pods_named(names)
    bound_at = [stamp(next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                           if c["type"] == "PodScheduled" and c["status"] == "True"))
                for pod in pods.values()]
    # PodScheduled times have 1 s resolution: a bind before the last boot shows as earlier by > 1 s.
    early_binds = [round(last_at - t, 1) for t in bound_at if t < last_at - 1.0]
    assert not early_binds, f"members bound before the last node booted (seconds early): {early_binds}"
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in sc.kube.nodes()}
    racks = {labels[node]["topology.quorum.dev/rack"] for node in placement.values()}
    assert len(racks) == 1, f"the gang must be inside one rack: {placement}"
    sc.record("early_to_last_boot_seconds", round(last_at - early_at, 1))
    sc.record("bind_skew", sc.bind_skew(names))
    sc.record("last_boot_to_bound_seconds", round(max(bound_at) - last_at, 1))
    sc.wait_for("Quorum's ProvisioningRequest deleted once the gang bound",
                lambda: not provisioning_requests(sc), timeout=30)
    sc.finish()
