"""Gangs on an autoscaled cluster: a real cluster-autoscaler (kwok provider) adds the nodes.

Runs on a cluster started with ``hack/cluster-up.sh --autoscaler --nodes 0 --blocks 1 --racks 2``
with the autoscaler balancing scale-ups over similar node groups, the rack label ignored
(``AUTOSCALER_MAX=6``, ``AUTOSCALER_FLAGS`` as in ``hack/test-all.sh``): no GPU node at the start,
two rack node groups of at most 6 nodes. Selected with ``-m autoscaler``
(``hack/test-all.sh`` runs it after the main suite). The autoscaler's simulation runs only the
in-tree plugins and never asks Quorum; Quorum's bind hold is what keeps members from binding before
the gang's last node exists.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

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


def stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def autoscaled_nodes(kube: Kube) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in kube.nodes()
            if GROUP_LABEL in (n["metadata"].get("labels") or {})}


@pytest.fixture
def autoscaled(request: pytest.FixtureRequest, kube: Kube, quorum: Quorum,
               settings: Settings) -> Iterator[Scenario]:
    """A scenario on the autoscaled cluster, the topology left empty (the nodes come and go with
    the autoscaler)."""
    yield from scenario_in(request, kube, quorum, settings, Topology({}))


def test_a_jobset_like_gang_from_zero_gpu_nodes_gets_its_nodes_and_binds_whole(autoscaled: Scenario) -> None:
    """Three Jobs, one PodGroup, 4 pods of a whole node each, and no GPU node at the start."""
    sc = autoscaled
    gpus = GPUS_PER_NODE
    # Nodes of an earlier scenario go once unneeded for 30 s (the local autoscaler's setting).
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
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
    last_node = max(stamp(n["metadata"]["creationTimestamp"]) for n in used.values())
    pods = sc.pods_named(names)
    bound_at = {name: stamp(next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                                 if c["type"] == "PodScheduled" and c["status"] == "True"))
                for name, pod in pods.items()}
    early = {name: round(last_node - t, 1) for name, t in bound_at.items() if t < last_node}
    assert not early, f"members bound before the last of the gang's nodes existed (seconds early): {early}"
    first_node = min(stamp(n["metadata"]["creationTimestamp"]) for n in used.values())
    sc.record("first_to_last_node_seconds", round(last_node - first_node, 1))
    sc.record("bind_skew", sc.bind_skew(names))
    sc.record("nodes_by_group", sorted(nodes[n]["metadata"]["labels"][GROUP_LABEL] for n in used))
    sc.record("created_to_all_bound_seconds", round(max(bound_at.values()) - created, 1))
    sc.finish()


def provisioning_requests(sc: Scenario) -> list[dict[str, Any]]:
    found = sc.kube.custom.list_namespaced_custom_object("autoscaling.x-k8s.io", "v1", sc.ns,
                                                         "provisioningrequests", _request_timeout=30)
    return list(found.get("items") or [])


def test_b_a_required_rack_gang_split_by_the_autoscaler_binds_whole_in_one_rack(
        autoscaled: Scenario, reconfigure: Reconfigurer) -> None:
    """The autoscaler balances a scale-up over similar node groups (the rack label ignored), so a
    gang of 4 whole nodes that requires one rack gets 2 + 2 nodes in two racks. Without Quorum's
    scale-up request that is a deadlock: the autoscaler believes the pods fit on its new nodes
    and adds nothing more, Quorum finds no rack for the gang. With it, Quorum asks for the missing
    room in the rack where the least is missing, and the gang binds whole there."""
    sc = autoscaled
    sc.wait_for("no autoscaled node left from before", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    reconfigure.apply({"autoscaling": {"provisioningRequests": False}})
    stuck = [m["metadata"]["name"] for m in sc.gang("stuck", 4, gpus=GPUS_PER_NODE, required="rack")]
    groups = sc.wait_for("the autoscaler's 4 nodes", lambda: (n := autoscaled_nodes(sc.kube)) and len(n) >= 4
                         and Counter(v["metadata"]["labels"][GROUP_LABEL] for v in n.values()), timeout=90)
    if len(groups) < 2:
        pytest.fail(f"the autoscaler did not split the scale-up over racks (balancing off?): {dict(groups)}")
    sc.assert_unbound_for(stuck, DEADLOCK_WATCH_SECONDS, what="the required-rack gang on a split scale-up")
    after = Counter(v["metadata"]["labels"][GROUP_LABEL] for v in autoscaled_nodes(sc.kube).values())
    assert after == groups, f"the autoscaler scaled again ({dict(groups)} -> {dict(after)}): no deadlock"
    reason = str((sc.gang_debug("stuck") or {}).get("reason"))[:200]
    sc.record("without_scale_up_requests", {"nodes_by_group": dict(groups), "reason": reason})
    sc.watcher.retire("stuck")
    sc.delete(stuck)
    reconfigure.restore()

    sc.wait_for("the split nodes scaled down", lambda: not autoscaled_nodes(sc.kube), timeout=150,
                interval=2)
    created = time.monotonic()
    whole = [m["metadata"]["name"] for m in sc.gang("whole", 4, gpus=GPUS_PER_NODE, required="rack")]
    placement = sc.wait_bound(whole, timeout=BIND_BOUND_SECONDS, what="the required-rack gang bound whole")
    nodes = autoscaled_nodes(sc.kube)
    racks = {nodes[node]["metadata"]["labels"][GROUP_LABEL] for node in placement.values()}
    assert len(racks) == 1, f"the gang must be inside one rack: {placement}"
    sc.record("with_scale_up_requests", {"bound_after_seconds": round(time.monotonic() - created, 1),
                                         "rack": racks.pop(), "bind_skew": sc.bind_skew(whole)})
    sc.wait_for("Quorum's ProvisioningRequest deleted once the gang bound",
                lambda: not provisioning_requests(sc), timeout=30)
    sc.finish()
