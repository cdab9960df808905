"""Gangs on an autoscaled cluster: a real cluster-autoscaler (kwok provider) adds the nodes.

Runs on a cluster started with ``hack/cluster-up.sh --autoscaler --nodes 0 --blocks 1 --racks 2``
and ``AUTOSCALER_MAX=2`` (no GPU node at the start; two node groups of at most 2 nodes, so a gang of
4 whole-node members needs both), selected with ``-m autoscaler``
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

from .cluster import Kube, Quorum, Settings, Topology
from .conftest import scenario_in
from .lifecycle_support import create_podgroup, job_manifest, job_pods
from .scenario import Scenario

pytestmark = pytest.mark.autoscaler

GROUP_LABEL = "autoscaling.quorum.dev/node-group"
GPUS_PER_NODE = 8  # hack/autoscaler-up.sh's node groups, as the static nodes (NODE_GPUS)


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
