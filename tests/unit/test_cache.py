"""extender.cluster.cache.ClusterCache: nodes, pod accounting, gang membership, PodGroups, domains, events."""

from __future__ import annotations

import pytest

from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import CacheEvent
from extender.cluster.records import GangHome, GangSpec

from .fixtures import LEVEL_LABELS, bound, load, make_node, make_pod, make_podgroup, topology_nodes

GiB = 2**30
N0 = "kwok-b0-r0-n0"
N1 = "kwok-b0-r0-n1"

B0 = "0:b0"
R00 = "1:b0/b0-r0"
H000 = f"2:b0/b0-r0/{N0}"


def kinds(events: list[CacheEvent]) -> list[tuple[str, str]]:
    return [(e.kind, e.key) for e in events]


# --------------------------------------------------------------------------- nodes


def test_recorded_node_record() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_node(load("node_kwok.json"))
    node = cache.nodes[N0]
    assert node.domains == ("b0", "b0-r0", N0)
    assert node.paths == (B0, R00, H000)
    assert node.allocatable == {"cpu": 64000, "memory": 512 * GiB, "nvidia.com/gpu": 8}
    assert node.pods_allocatable == 110
    assert cache.domain_nodes[R00] == {N0}


def test_node_upsert_and_delete(cache: ClusterCache, events: list[CacheEvent]) -> None:
    assert len(cache.nodes) == 8
    version = cache.capacity_version
    cache.upsert_node(make_node(N0, "b0", "b0-r0", gpus=4))
    assert cache.nodes[N0].allocatable["nvidia.com/gpu"] == 4
    assert cache.capacity_version > version
    # A node that shrank cannot make room for anything, but its reservations may no longer fit.
    assert kinds(events) == [("node-changed", N0)]
    cache.upsert_node(make_node(N0, "b0", "b0-r0", gpus=4))  # unchanged: no event
    assert kinds(events) == [("node-changed", N0)]
    cache.delete_node(N0)
    assert N0 not in cache.nodes
    assert N0 not in cache.domain_nodes[R00]
    assert kinds(events) == [("node-changed", N0), ("node-removed", N0)]
    cache.delete_node(N0)  # unknown node: nothing happens
    assert kinds(events) == [("node-changed", N0), ("node-removed", N0)]


def test_node_without_topology_labels_has_no_domains() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    node = make_node("edge-1", "b0", "b0-r0")
    labels = node["metadata"]["labels"]
    del labels["topology.quorum.dev/block"], labels["topology.quorum.dev/rack"]
    cache.upsert_node(node)
    assert cache.nodes["edge-1"].domains == ("", "", "edge-1")
    assert cache.nodes["edge-1"].paths[:2] == ("", "")


def test_replace_nodes_removes_missing(cache: ClusterCache, events: list[CacheEvent]) -> None:
    cache.replace_nodes(topology_nodes(blocks=1, racks=1, per_rack=2))
    assert sorted(cache.nodes) == [N0, N1]
    assert len([e for e in events if e.kind == "node-removed"]) == 6
    assert cache.synced["nodes"] is True


# --------------------------------------------------------------------------- pod accounting


def test_bound_pod_uses_node_capacity(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running"))
    assert cache.node_used[N0] == {"cpu": 8000, "memory": 64 * GiB, "nvidia.com/gpu": 2}
    assert cache.node_pod_count[N0] == 1
    free, pods_free = cache.free_on(cache.nodes[N0])
    assert free == {"cpu": 56000, "memory": 448 * GiB, "nvidia.com/gpu": 6}
    assert pods_free == 109


def test_pending_pod_uses_nothing(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0"))
    assert cache.pods["u0"].pending
    assert not cache.node_used.get(N0)
    assert cache.free_on(cache.nodes[N0])[1] == 110


def test_pod_without_uid_is_ignored(cache: ClusterCache) -> None:
    pod = make_pod("w0", "", node=N0, phase="Running")
    cache.upsert_pod(pod)
    assert cache.pods == {}
    assert cache.node_pod_count.get(N0, 0) == 0


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminal_pod_frees_its_requests(cache: ClusterCache, events: list[CacheEvent], phase: str) -> None:
    pod = make_pod("w0", "u0", node=N0, phase="Running")
    cache.upsert_pod(pod)
    cache.upsert_pod(bound(pod, N0, phase=phase))
    assert not cache.node_used[N0]
    assert cache.node_pod_count[N0] == 0
    assert cache.free_on(cache.nodes[N0]) == (cache.nodes[N0].allocatable, 110)
    assert ("pod-removed", "u0") in kinds(events)
    assert "u0" in cache.pods  # still known until deleted, just not holding capacity


def test_deleting_pod_still_holds_capacity(cache: ClusterCache, events: list[CacheEvent]) -> None:
    pod = make_pod("w0", "u0", node=N0, phase="Running")
    cache.upsert_pod(pod)
    terminating = make_pod("w0", "u0", node=N0, phase="Running", deleting=True)
    cache.upsert_pod(terminating)
    # kube-scheduler keeps counting a terminating pod until it is gone.
    assert cache.node_pod_count[N0] == 1
    assert cache.node_used[N0]["nvidia.com/gpu"] == 2
    assert not cache.pods["u0"].pending
    assert kinds(events)[-1] == ("pod-removed", "u0")  # the coordinator hears it is going away
    cache.delete_pod(terminating)
    assert cache.node_pod_count[N0] == 0
    assert not cache.node_used[N0]


def test_pod_binding_emits_pod_bound_once(cache: ClusterCache, events: list[CacheEvent]) -> None:
    pending = make_pod("w0", "u0")
    cache.upsert_pod(pending)
    assert events == []
    running = bound(pending, N1)
    cache.upsert_pod(running)
    assert kinds(events) == [("pod-bound", "u0")]
    assert events[0].pod is not None and events[0].pod.node_name == N1
    cache.upsert_pod(running)  # a later status update is not a new binding
    assert kinds(events) == [("pod-bound", "u0")]
    assert cache.node_pod_count[N1] == 1  # and is not counted twice
    assert cache.node_used[N1]["cpu"] == 8000


def test_delete_emits_pod_removed_and_frees(cache: ClusterCache, events: list[CacheEvent]) -> None:
    pod = make_pod("w0", "u0", node=N0, phase="Running")
    cache.upsert_pod(pod)
    events.clear()
    cache.delete_pod(pod)
    assert kinds(events) == [("pod-removed", "u0"), ("capacity-freed", N0)]
    assert events[0].pod is not None and events[0].pod.name == "w0"
    assert "u0" not in cache.pods
    assert cache.node_pod_count[N0] == 0
    cache.delete_pod(pod)  # already gone: a bare notice, so that a bind counted for it still goes
    assert kinds(events[2:]) == [("pod-removed", "u0")] and events[2].pod is None
    assert cache.node_pod_count[N0] == 0


def test_replace_pods_removes_missing(cache: ClusterCache, events: list[CacheEvent]) -> None:
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running"))
    cache.upsert_pod(make_pod("w1", "u1", node=N0, phase="Running"))
    events.clear()
    cache.replace_pods([make_pod("w1", "u1", node=N0, phase="Running"), make_pod("w2", "u2", node=N1)])
    assert sorted(cache.pods) == ["u1", "u2"]
    assert cache.node_pod_count[N0] == 1
    assert cache.node_pod_count[N1] == 1
    assert ("pod-removed", "u0") in kinds(events)
    assert ("pod-bound", "u2") in kinds(events)
    assert cache.synced["pods"] is True


def test_pod_on_unknown_node_is_counted_when_the_node_appears() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running"))
    assert cache.domain_pods == {}
    cache.upsert_node(make_node(N0, "b0", "b0-r0"))
    assert cache.domain_pods == {B0: 1, R00: 1, H000: 1}
    assert cache.free_on(cache.nodes[N0])[1] == 109


# --------------------------------------------------------------------------- gangs


def test_gang_membership_via_scheduling_group(cache: ClusterCache) -> None:
    cache.upsert_pod(load("pod_gang_member.json"))
    cache.upsert_pod(make_pod("train-a-worker-1", "u1", group="train-a"))
    cache.upsert_pod(make_pod("loner", "u2"))
    assert cache.pods["u1"].gang_key == "ml/train-a"
    assert cache.pods["u2"].gang_key is None
    assert sorted(p.name for p in cache.members("ml/train-a")) == ["train-a-worker-0", "train-a-worker-1"]
    assert cache.gang_spec("ml/train-a") is None  # no PodGroup yet, no annotations: unknown size


def test_bound_count_counts_members_holding_capacity(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0", group="train-a", node=N0, phase="Running"))
    cache.upsert_pod(make_pod("w1", "u1", group="train-a", node=N1, phase="Succeeded"))
    cache.upsert_pod(make_pod("w2", "u2", group="train-a"))
    cache.upsert_pod(make_pod("x0", "u3", group="train-b", node=N0, phase="Running"))
    assert cache.bound_count("ml/train-a") == 1  # finished and pending members do not count
    assert cache.bound_count("ml/unknown") == 0


def test_gang_membership_and_spec_via_annotations(cache: ClusterCache) -> None:
    annotations = {"quorum.dev/required-topology": "rack"}
    for i in range(3):
        cache.upsert_pod(make_pod(f"b{i}", f"u{i}", gang_annotation="train-b", min_count=3,
                                  annotations=annotations))
    assert len(cache.members("ml/train-b")) == 3
    spec = cache.gang_spec("ml/train-b")
    assert spec is not None
    assert (spec.key, spec.min_count, spec.required_topology, spec.is_gang) == ("ml/train-b", 3, "rack", True)
    assert spec.source == "annotations"


def test_gang_is_namespace_scoped(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("a", "u1", group="train-a", namespace="team-1"))
    cache.upsert_pod(make_pod("a", "u2", group="train-a", namespace="team-2"))
    assert [p.uid for p in cache.members("team-1/train-a")] == ["u1"]
    assert [p.uid for p in cache.members("team-2/train-a")] == ["u2"]


def test_last_member_deleted_forgets_annotation_gang(cache: ClusterCache) -> None:
    pods = [make_pod(f"b{i}", f"u{i}", gang_annotation="train-b", min_count=2) for i in range(2)]
    for pod in pods:
        cache.upsert_pod(pod)
    cache.delete_pod(pods[0])
    assert cache.gang_spec("ml/train-b") is not None
    cache.delete_pod(pods[1])
    assert "ml/train-b" not in cache.gang_members
    assert cache.gang_spec("ml/train-b") is None


def test_a_departed_members_declaration_gives_way_to_its_mates(cache: ClusterCache,
                                                               events: list[CacheEvent]) -> None:
    """The latest member's annotations declare the gang; when that member goes while others stay
    (its add and delete told late, after its mates', as a lagging watch or a relist may), the
    latest remaining member's declaration is the gang's again, and the change is told."""
    mates = [make_pod(f"b{i}", f"u{i}", gang_annotation="train-b", min_count=3) for i in range(2)]
    for pod in mates:
        cache.upsert_pod(pod)
    departed = make_pod("old", "u-old", gang_annotation="train-b", min_count=2)
    cache.upsert_pod(departed)
    assert cache.gang_spec("ml/train-b").min_count == 2  # type: ignore[union-attr]
    events.clear()
    cache.delete_pod(departed)
    assert cache.gang_spec("ml/train-b").min_count == 3  # type: ignore[union-attr]
    assert ("gang-changed", "ml/train-b") in kinds(events)
    events.clear()
    cache.delete_pod(mates[0])  # not the declaring member: nothing to tell
    assert cache.gang_spec("ml/train-b").min_count == 3  # type: ignore[union-attr]
    assert ("gang-changed", "ml/train-b") not in kinds(events)


def test_a_departed_members_topology_gives_way_to_its_mates(cache: ClusterCache,
                                                            events: list[CacheEvent]) -> None:
    """The same for the topology members ask for (Kueue's annotations, used when the PodGroup names
    none): a departed member's level is not the gang's once its mates remain."""
    cache.upsert_podgroup(make_podgroup("train-t", 2))
    asks = {"kueue.x-k8s.io/podset-required-topology": "topology.quorum.dev/rack"}
    for i in range(2):
        cache.upsert_pod(make_pod(f"t{i}", f"t{i}", group="train-t", annotations=asks))
    departed = make_pod("old", "t-old", group="train-t",
                        annotations={"kueue.x-k8s.io/podset-required-topology": "topology.quorum.dev/block"})
    cache.upsert_pod(departed)
    assert cache.gang_spec("ml/train-t").required_topology == "topology.quorum.dev/block"  # type: ignore[union-attr]
    events.clear()
    cache.delete_pod(departed)
    assert cache.gang_spec("ml/train-t").required_topology == "topology.quorum.dev/rack"  # type: ignore[union-attr]
    assert ("gang-changed", "ml/train-t") in kinds(events)


def test_member_leaving_gang_by_update_forgets_annotation_gang(cache: ClusterCache) -> None:
    # The same pod re-labelled out of its gang must leave no trace of the gang, as a delete does.
    pod = make_pod("b0", "u0", gang_annotation="train-b", min_count=1)
    cache.upsert_pod(pod)
    cache.upsert_pod(make_pod("b0", "u0"))
    assert cache.pods["u0"].gang_key is None
    assert cache.members("ml/train-b") == []
    assert cache.gang_spec("ml/train-b") is None


def test_member_moving_between_gangs(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w", "u0", group="train-a"))
    cache.upsert_pod(make_pod("w", "u0", group="train-c"))
    assert cache.members("ml/train-a") == []
    assert [p.uid for p in cache.members("ml/train-c")] == ["u0"]


def test_podgroup_upsert_delete_and_events(cache: ClusterCache, events: list[CacheEvent]) -> None:
    group = load("podgroup_gang.json")
    cache.upsert_podgroup(group)
    spec = cache.gang_spec("ml/train-a")
    assert spec == GangSpec(
        key="ml/train-a", min_count=4, is_gang=True, required_topology="topology.quorum.dev/rack",
        priority=100, created="2025-03-14T09:21:05Z", source="scheduling.k8s.io/v1beta1 PodGroup",
        home=GangHome("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups", "ml", "train-a", conditions=True),
    )
    group["spec"]["schedulingPolicy"]["gang"]["minCount"] = 6
    cache.upsert_podgroup(group)
    assert cache.gang_spec("ml/train-a").min_count == 6  # type: ignore[union-attr]
    cache.delete_podgroup(group)
    assert cache.gang_spec("ml/train-a") is None
    assert kinds(events) == [("gang-changed", "ml/train-a"), ("gang-changed", "ml/train-a"),
                             ("gang-removed", "ml/train-a")]
    cache.delete_podgroup(group)  # unknown: no event
    assert len(events) == 3


def test_podgroup_wins_over_annotations(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0", group="train-a", gang_annotation="train-a", min_count=2))
    annotated = cache.gang_spec("ml/train-a")
    assert annotated is not None and annotated.min_count == 2 and annotated.source == "annotations"
    cache.upsert_podgroup(make_podgroup("train-a", 4))
    spec = cache.gang_spec("ml/train-a")
    assert spec is not None and spec.min_count == 4 and spec.source.endswith("PodGroup")
    cache.delete_podgroup(make_podgroup("train-a", 4))
    fallback = cache.gang_spec("ml/train-a")
    assert fallback is not None and fallback.min_count == 2


def test_basic_policy_podgroup_is_not_a_gang(cache: ClusterCache) -> None:
    cache.upsert_podgroup(load("podgroup_basic.json"))
    spec = cache.gang_spec("ml/web-frontend")
    assert spec is not None
    assert spec.is_gang is False
    assert spec.required_topology is None


def test_replace_podgroups(cache: ClusterCache, events: list[CacheEvent]) -> None:
    cache.upsert_podgroup(make_podgroup("old", 2))
    cache.replace_podgroups([make_podgroup("new", 3)])
    assert sorted(cache.podgroup_specs) == ["ml/new"]
    assert ("gang-removed", "ml/old") in kinds(events)
    assert cache.synced["podgroups"] is True


# --------------------------------------------------------------------------- domains


def test_domain_pods_and_occupancy_epoch(cache: ClusterCache) -> None:
    epoch = cache.occupancy_epoch
    first = make_pod("w0", "u0", node=N0, phase="Running")
    cache.upsert_pod(first)
    assert cache.domain_pods == {B0: 1, R00: 1, H000: 1}
    assert cache.occupancy_epoch > epoch

    # A second pod in the same rack, on another host: only the new host turns non-empty.
    epoch = cache.occupancy_epoch
    second = make_pod("w1", "u1", node=N1, phase="Running")
    cache.upsert_pod(second)
    assert cache.domain_pods[R00] == 2
    assert cache.domain_pods[B0] == 2
    assert cache.occupancy_epoch > epoch

    # A third pod on an already used host: occupancy (empty / non-empty) does not move.
    epoch = cache.occupancy_epoch
    third = make_pod("w2", "u2", node=N0, phase="Running")
    cache.upsert_pod(third)
    assert cache.occupancy_epoch == epoch

    cache.delete_pod(third)
    assert cache.occupancy_epoch == epoch  # host n0 still holds the first pod
    cache.delete_pod(second)
    assert cache.occupancy_epoch > epoch  # host n1 became empty
    epoch = cache.occupancy_epoch
    cache.delete_pod(first)
    assert cache.domain_pods == {}
    assert cache.occupancy_epoch > epoch  # rack, block and host became empty


def test_pending_and_terminal_pods_do_not_occupy_domains(cache: ClusterCache) -> None:
    epoch = cache.occupancy_epoch
    cache.upsert_pod(make_pod("w0", "u0"))
    cache.upsert_pod(make_pod("w1", "u1", node=N0, phase="Succeeded"))
    assert cache.domain_pods == {}
    assert cache.occupancy_epoch == epoch


def test_relabelled_node_moves_its_pods_between_racks(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running"))
    epoch = cache.occupancy_epoch
    cache.upsert_node(make_node(N0, "b0", "b0-r1"))
    assert R00 not in cache.domain_pods
    assert cache.domain_pods["1:b0/b0-r1"] == 1
    assert cache.domain_pods[f"2:b0/b0-r1/{N0}"] == 1
    assert cache.domain_pods[B0] == 1
    assert N0 in cache.domain_nodes["1:b0/b0-r1"]
    assert N0 not in cache.domain_nodes.get(R00, set())
    assert cache.occupancy_epoch > epoch


def test_deleted_node_stops_counting_its_domains(cache: ClusterCache) -> None:
    pod = make_pod("w0", "u0", node=N0, phase="Running")
    cache.upsert_pod(pod)
    cache.delete_node(N0)
    assert cache.domain_pods == {}
    cache.delete_pod(pod)  # the pod going later must not drive counts negative
    assert cache.domain_pods == {}
    assert cache.node_pod_count[N0] == 0


def test_a_node_without_a_hostname_label_is_its_own_host() -> None:
    """cluster-autoscaler's kwok nodes carry their group's labels but no hostname: a gang that must
    stay in one rack can still use them (the host level is the node itself)."""
    from extender.cluster.records import node_record

    node = make_node("b0-r0-x1y2z", "b0", "b0-r0")
    del node["metadata"]["labels"]["kubernetes.io/hostname"]
    record = node_record(node, LEVEL_LABELS)
    assert record.domains == ("b0", "b0-r0", "b0-r0-x1y2z")
    del node["metadata"]["labels"]["topology.quorum.dev/rack"]
    assert node_record(node, LEVEL_LABELS).domains == ("b0", "", "b0-r0-x1y2z")  # other levels stay unknown
