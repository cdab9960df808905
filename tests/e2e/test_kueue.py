"""Jobs and JobSets admitted by the real Kueue (``hack/cluster-up.sh --jobset --kueue``), then bound
whole by Quorum.

The split of duties (docs/kueue.md): Kueue owns quota and admission, and with topology-aware
scheduling it picks the domain (here a rack) and pins each pod to it with a nodeSelector when it
lifts its ``kueue.x-k8s.io/topology`` scheduling gate. Quorum owns the whole-gang bind inside what
Kueue admitted: kube-scheduler offers it only the nodes of that rack, and Quorum places the gang
among them or binds none of it. A workload Kueue has not admitted stays suspended: no pod exists to
bind. Each test was seen to fail with the behaviour broken (docs/kueue.md says how).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from .cluster import Kube, Settings, Topology
from .lifecycle_support import job_manifest, job_pods, kwok_annotations, live_bound
from .scenario import Scenario, node_of
from .test_jobset import create as create_jobset
from .test_jobset import require_jobset
from .test_jobset_gangs import jobset, jobset_pods, replicated_job
from .test_rank_order import completion_index, ranks_apart

pytestmark = pytest.mark.controllers

KUEUE, V = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
# Racks are Kueue's lowest level in one Topology: it pins a workload's pods to one rack, and Quorum
# places them inside it. The other ends with kubernetes.io/hostname: Kueue pins each pod to a node of
# its own, and Quorum binds each member on its node.
TOPOLOGY, FLAVOR = "quorum-e2e-racks", "quorum-e2e-gpus"
HOST_TOPOLOGY, HOST_FLAVOR = "quorum-e2e-hosts", "quorum-e2e-host-gpus"
ROOMY, TIGHT = "quorum-e2e-roomy", "quorum-e2e-tight"  # ClusterQueues: all GPUs; one GPU
HOSTS = "quorum-e2e-hosts"  # a ClusterQueue of all GPUs on the hostname-level flavor
HOST_LABEL = "kubernetes.io/hostname"


def require_kueue(kube: Kube) -> None:
    try:
        kube.custom.list_cluster_custom_object(KUEUE, V, "clusterqueues", _request_timeout=10)
    except ApiException as exc:
        if exc.status != 404:
            raise
        pytest.fail("the Kueue API is not served: start the cluster with hack/cluster-up.sh --jobset "
                    "--kueue (hack/test-all.sh does)")


@pytest.fixture(scope="module")
def cluster_queues(kube: Kube, settings: Settings, topology: Topology) -> Iterator[dict[str, str]]:
    """Two Topologies of the cluster's labels (block and rack; block, rack and host), a ResourceFlavor
    of the GPU nodes on each, and three ClusterQueues: every GPU of the cluster and a single GPU on
    the rack-level flavor, every GPU on the host-level one. Names carry a
    token of this run, so that objects an earlier run left (being deleted) are never reused."""
    require_kueue(kube)
    token = secrets.token_hex(3)
    names = {"topology": f"{TOPOLOGY}-{token}", "flavor": f"{FLAVOR}-{token}",
             "host-topology": f"{HOST_TOPOLOGY}-{token}", "host-flavor": f"{HOST_FLAVOR}-{token}",
             ROOMY: f"{ROOMY}-{token}", TIGHT: f"{TIGHT}-{token}", HOSTS: f"{HOSTS}-{token}"}
    gpus = sum(len(nodes) for nodes in topology.racks.values()) * topology.gpus_per_node
    racks = [{"nodeLabel": settings.block_label}, {"nodeLabel": settings.rack_label}]
    made: list[tuple[str, dict[str, Any]]] = []
    for name, levels, flavor in (("topology", racks, "flavor"),
                                 ("host-topology", [*racks, {"nodeLabel": HOST_LABEL}], "host-flavor")):
        made.append(("topologies", {"apiVersion": f"{KUEUE}/{V}", "kind": "Topology",
                                    "metadata": {"name": names[name]}, "spec": {"levels": levels}}))
        made.append(("resourceflavors", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "ResourceFlavor", "metadata": {"name": names[flavor]},
            "spec": {"nodeLabels": {"type": "kwok"}, "topologyName": names[name]}}))
    for queue, quota, flavor in ((ROOMY, gpus, "flavor"), (TIGHT, 1, "flavor"), (HOSTS, gpus, "host-flavor")):
        made.append(("clusterqueues", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "ClusterQueue", "metadata": {"name": names[queue]},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", settings.gpu_resource],
                "flavors": [{"name": names[flavor], "resources": [
                    {"name": "cpu", "nominalQuota": "10000"},
                    {"name": settings.gpu_resource, "nominalQuota": str(quota)}]}]}]}}))
    for plural, body in made:
        kube.custom.create_cluster_custom_object(KUEUE, V, plural, body, _request_timeout=30)
    yield names
    for plural, body in reversed(made):  # best effort: Kueue lets them go once no workload uses them
        try:
            kube.custom.delete_cluster_custom_object(KUEUE, V, plural, body["metadata"]["name"],
                                                     _request_timeout=30)
        except ApiException:
            pass


@pytest.fixture
def queues(scenario: Scenario, cluster_queues: dict[str, str]) -> dict[str, str]:
    """A LocalQueue of each ClusterQueue in the test's namespace; their names by ClusterQueue."""
    local = {}
    for queue in (ROOMY, TIGHT, HOSTS):
        local[queue] = queue.removeprefix("quorum-e2e-")
        scenario.kube.custom.create_namespaced_custom_object(KUEUE, V, scenario.ns, "localqueues", {
            "apiVersion": f"{KUEUE}/{V}", "kind": "LocalQueue", "metadata": {"name": local[queue]},
            "spec": {"clusterQueue": cluster_queues[queue]}}, _request_timeout=30)
    return local


def queued(manifest: dict[str, Any], queue: str, template: dict[str, Any], rack_label: str) -> None:
    """Name the LocalQueue on the workload and ask Kueue for one rack in its pod template."""
    manifest["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    template["metadata"].setdefault("annotations", {})[REQUIRED_TOPOLOGY] = rack_label


def workloads(sc: Scenario) -> list[dict[str, Any]]:
    found = sc.kube.custom.list_namespaced_custom_object(KUEUE, V, sc.ns, "workloads", _request_timeout=30)
    return list(found.get("items") or [])


def admitted(workload: dict[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions)


def pinned_racks(sc: Scenario, pods: list[dict[str, Any]]) -> set[str]:
    """The racks Kueue pinned the pods to (its nodeSelector, set when it lifted its gate)."""
    return {(p["spec"].get("nodeSelector") or {}).get(sc.settings.rack_label, "") for p in pods}


def bound_queued_job(sc: Scenario, name: str, queue: str, annotations: dict[str, str] | None = None,
                     ) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A Job of one rack's worth of whole-node pods through ``queue``, a gang, once all are bound:
    (pod name -> node, the pods). ``annotations`` go on every pod."""
    size = min(len(nodes) for nodes in sc.topo.racks.values())
    job = job_manifest(sc.settings, name, size, gpus=sc.topo.gpus_per_node, gang=name,
                       annotations=annotations)
    queued(job, queue, job["spec"]["template"], sc.settings.rack_label)
    sc.kube.create_job(sc.ns, job)
    placement = sc.wait_for(f"all {size} pods of the Kueue-admitted Job {name} bound",
                            lambda: live_bound(sc, name, size), timeout=120)
    return placement, job_pods(sc.kube, sc.ns, name)


def test_a_kueue_admitted_job_binds_whole_inside_the_rack_kueue_assigned(
        scenario: Scenario, queues: dict[str, str]) -> None:
    sc = scenario
    placement, pods = bound_queued_job(sc, "admitted", queues[ROOMY])
    assert all(admitted(w) for w in workloads(sc)), "bound before Kueue admitted the workload"
    racks = pinned_racks(sc, pods)
    assert len(racks) == 1 and "" not in racks, f"Kueue pins every pod to one rack: {racks}"
    bound_racks, _ = sc.racks_and_blocks(placement)
    assert bound_racks == racks, f"bound in {bound_racks}, Kueue assigned {racks}: {placement}"
    gates = [g.get("name") for p in pods for g in p["spec"].get("schedulingGates") or []]
    assert TOPOLOGY_GATE not in gates, "bound while Kueue's topology gate was on"
    sc.finish()


def test_a_job_kueue_pins_member_by_member_to_nodes_binds_whole_on_those_nodes(
        scenario: Scenario, queues: dict[str, str]) -> None:
    """A Topology whose lowest level is the host: Kueue pins each pod to a node of its own, and
    kube-scheduler offers each member only that node; Quorum places the gang on exactly those."""
    sc = scenario
    placement, pods = bound_queued_job(sc, "hosts", queues[HOSTS])
    pins = {p["metadata"]["name"]: (p["spec"].get("nodeSelector") or {}).get(HOST_LABEL, "") for p in pods}
    assert "" not in pins.values() and len(set(pins.values())) == len(pods), \
        f"Kueue pins each pod to a node of its own: {pins}"
    assert {name: node for name, node in placement.items() if name in pins} == pins, \
        f"bound {placement}, Kueue pinned {pins}"
    sc.finish()


def test_a_job_kueue_has_not_admitted_binds_nothing(scenario: Scenario, queues: dict[str, str]) -> None:
    """Its ClusterQueue has one GPU; the Job needs two nodes' worth: Kueue keeps it suspended."""
    sc, topo = scenario, scenario.topo
    job = job_manifest(sc.settings, "waiting", 2, gpus=topo.gpus_per_node, gang="waiting")
    queued(job, queues[TIGHT], job["spec"]["template"], sc.settings.rack_label)
    sc.kube.create_job(sc.ns, job)
    sc.wait_for("Kueue's Workload for the Job", lambda: workloads(sc) or None, timeout=60)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        bound = {p["metadata"]["name"]: node_of(p) for p in job_pods(sc.kube, sc.ns, "waiting") if node_of(p)}
        assert not bound, f"pods of a Job Kueue has not admitted got bound: {bound}"
        time.sleep(0.5)
    assert not any(admitted(w) for w in workloads(sc))
    sc.finish()


def test_a_kueue_admitted_jobset_binds_whole_inside_the_rack_kueue_assigned(
        scenario: Scenario, queues: dict[str, str]) -> None:
    """A JobSet that asks Quorum for one gang of all its pods (``quorum.dev/jobset-gang``)."""
    sc, topo = scenario, scenario.topo
    require_jobset(sc)
    size = min(len(nodes) for nodes in topo.racks.values())
    parts = [replicated_job(sc, "leader", 1, 1, topo.gpus_per_node, "kq-js", size),
             replicated_job(sc, "workers", 1, size - 1, topo.gpus_per_node, "kq-js", size)]
    body = jobset("kq", parts, jobset_gang="jobset")
    for part in parts:
        queued(body, queues[ROOMY], part["template"]["spec"]["template"], sc.settings.rack_label)
    create_jobset(sc, body)
    names = jobset_pods(sc, "kq", size, timeout=90)
    placement = sc.wait_bound(names, timeout=120, what=f"all {size} pods of the Kueue-admitted JobSet bound")
    pods = list(sc.pods_named(names).values())
    racks = pinned_racks(sc, pods)
    assert len(racks) == 1 and "" not in racks, f"Kueue pins every pod to one rack: {racks}"
    bound_racks, _ = sc.racks_and_blocks(placement)
    assert bound_racks == racks, f"bound in {bound_racks}, Kueue assigned {racks}: {placement}"
    sc.finish()


def quorum_reasons(sc: Scenario) -> list[str]:
    """The reasons of every Event Quorum reported in the test's namespace."""
    return [str(e.get("reason")) for e in sc.kube.events(sc.ns)
            if (e.get("reportingController") or e.get("reportingComponent")) == "quorum.dev/extender"]


def pods_ready_evictions(workload: dict[str, Any]) -> int:
    """How many times Kueue evicted the workload for its waitForPodsReady timeout."""
    state = (workload.get("status") or {}).get("requeueState") or {}
    return int(state.get("count") or 0)


def test_a_kueue_gang_never_ready_is_requeued_by_kueue_alone(
        scenario: Scenario, queues: dict[str, str]) -> None:
    """Kueue's waitForPodsReady is on (KUEUE_PODS_READY_TIMEOUT, 15 s here) and the gang also asks
    Quorum for a 5-second readiness timeout: Kueue admitted the workload, so Quorum stands back
    (the split of duties, docs/kueue.md) and Kueue alone evicts the workload, once per timeout."""
    sc = scenario
    _, pods = bound_queued_job(sc, "slow", queues[ROOMY], annotations={
        **kwok_annotations(never_ready=True), "quorum.dev/pods-ready-timeout-seconds": "5"})
    bound_at = time.monotonic()
    sc.wait_for("Kueue's eviction of the workload for its readiness timeout",
                lambda: any(pods_ready_evictions(w) for w in workloads(sc)), timeout=60)
    waited = time.monotonic() - bound_at
    assert [pods_ready_evictions(w) for w in workloads(sc)] == [1], workloads(sc)
    reasons = quorum_reasons(sc)
    assert "Requeued" not in reasons, f"Quorum requeued a gang Kueue owns: {reasons}"
    assert "LeftToKueue" in reasons, reasons
    assert waited > 8, f"evicted {waited:.0f} s after the bind: Quorum's 5 s, not Kueue's 15 s"
    assert all("quorum.dev/requeue-count" not in (p["metadata"].get("annotations") or {}) for p in pods)
    sc.watcher.retire("slow")  # Kueue re-admits it after its backoff: its pods come and go
    sc.finish()


def test_a_kueue_admitted_indexed_job_keeps_consecutive_ranks_together(
        scenario: Scenario, queues: dict[str, str]) -> None:
    """Kueue pins the pods to one rack; inside it Quorum hands the slots out in rank order, four
    members per node: consecutive completion indexes on the same or the next node."""
    sc, topo = scenario, scenario.topo
    size = 4 * min(len(nodes) for nodes in topo.racks.values())
    job = job_manifest(sc.settings, "ranked", size, gpus=topo.gpus_per_node // 4, gang="ranked",
                       backoff_limit_per_index=50)
    queued(job, queues[ROOMY], job["spec"]["template"], sc.settings.rack_label)
    sc.kube.create_job(sc.ns, job)
    sc.wait_for(f"all {size} pods of the Kueue-admitted Indexed Job bound",
                lambda: live_bound(sc, "ranked", size), timeout=120)
    pods = job_pods(sc.kube, sc.ns, "ranked")
    assert len(pinned_racks(sc, pods)) == 1, "Kueue pins every pod to one rack"
    problem = ranks_apart(sc, {completion_index(p): node_of(p) for p in pods}, size)
    assert not problem, problem
    sc.finish()
