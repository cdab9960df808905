"""Cache counts, events that can help a gang, hostile objects, the synced event and bounded state."""

from __future__ import annotations

import copy

from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import CACHES_SYNCED, CacheEvent
from extender.cluster.resources import MAX_UNITS, QuantityError

from .fixtures import LEVEL_LABELS, bound, make_node, make_pod, make_podgroup, topology_nodes
from .test_cache import kinds

GiB = 2**30
N0 = "kwok-b0-r0-n0"
N1 = "kwok-b0-r0-n1"


# --------------------------------------------------------------------------- counts and capacity version


def test_counts(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0"))
    cache.upsert_pod(make_pod("w1", "u1", node=N0, phase="Running"))
    cache.upsert_podgroup(make_podgroup("train-a", 2))
    assert cache.counts() == {"nodes": 8, "pods": 2, "podgroups": 1, "resourceslices": 0,
                              "resourceclaims": 0, "deviceclasses": 0, "device_kinds": 0}


def test_capacity_version_moves_only_when_free_capacity_can_change(cache: ClusterCache) -> None:
    pending = make_pod("w0", "u0")
    cache.upsert_pod(pending)
    moving = [
        lambda: cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running")),
        lambda: cache.delete_pod(make_pod("w0", "u0")),
        lambda: cache.upsert_node(make_node("kwok-b9-r0-n0", "b9", "b9-r0")),
        lambda: cache.delete_node("kwok-b9-r0-n0"),
    ]
    for step in moving:
        before = cache.capacity_version
        step()
        assert cache.capacity_version > before
    cache.upsert_pod(make_pod("w1", "u1"))
    still = [
        lambda: cache.upsert_pod({**make_pod("w1", "u1"), "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
        lambda: cache.upsert_podgroup(make_podgroup("train-a", 2)),
        lambda: cache.delete_podgroup(make_podgroup("train-a", 2)),
    ]
    for step in still:
        before = cache.capacity_version
        step()
        assert cache.capacity_version == before


def test_a_node_heartbeat_moves_no_capacity_version_and_keeps_its_free_capacity(
        cache: ClusterCache, events: list[CacheEvent]) -> None:
    """kubelets (and kwok, every 20-45 s) rewrite a node's conditions with new heartbeat times; that
    changes nothing Quorum reads, so what was computed from the node stays valid."""
    node = make_node(N0, "b0", "b0-r0")
    cache.upsert_node(node)
    free_before = cache.free_on(cache.nodes[N0])[0]
    before, seen = cache.capacity_version, len(events)
    beat = copy.deepcopy(node)
    beat["metadata"]["resourceVersion"] = "999"
    beat["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                     "lastHeartbeatTime": "2026-11-28T22:00:00Z"}]
    cache.upsert_node(beat)
    assert cache.capacity_version == before and len(events) == seen
    assert cache.free_on(cache.nodes[N0])[0] is free_before  # the cached figure, not a recount
    for changed in (make_node(N0, "b0", "b0-r0", gpus=4),  # shrank
                    {**beat, "status": {**beat["status"], "conditions": [{"type": "Ready",
                                                                           "status": "False"}]}}):
        before = cache.capacity_version
        cache.upsert_node(changed)
        assert cache.capacity_version > before


# --------------------------------------------------------------------------- changes that can help a gang


def test_capacity_freed_when_a_node_appears_or_grows(cache: ClusterCache, events: list[CacheEvent]) -> None:
    cache.upsert_node(make_node("kwok-b9-r0-n0", "b9", "b9-r0"))
    assert kinds(events) == [("capacity-freed", "kwok-b9-r0-n0")]
    events.clear()
    cache.upsert_node(make_node("kwok-b9-r0-n0", "b9", "b9-r0"))  # a heartbeat: same allocatable
    assert events == []
    cache.upsert_node(make_node("kwok-b9-r0-n0", "b9", "b9-r0", gpus=16))
    assert kinds(events) == [("capacity-freed", "kwok-b9-r0-n0")]


def test_capacity_freed_only_once_a_pod_stops_holding_it(
    cache: ClusterCache, events: list[CacheEvent]
) -> None:
    pod = make_pod("w0", "u0", node=N0, phase="Running")
    cache.upsert_pod(pod)
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running", deleting=True))
    assert ("capacity-freed", N0) not in kinds(events)  # terminating pods still hold their node
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Succeeded", deleting=True))
    assert kinds(events)[-1] == ("capacity-freed", N0)
    events.clear()
    cache.delete_pod(pod)  # already counted as freed
    assert kinds(events) == [("pod-removed", "u0")]


def test_member_ready_when_a_schedulable_pod_joins_a_gang(
    cache: ClusterCache, events: list[CacheEvent]
) -> None:
    pod = make_pod("w0", "u0", gang_annotation="train", min_count=2)
    cache.upsert_pod(pod)
    assert kinds(events) == [("member-ready", "ml/train")]
    cache.upsert_pod(pod)  # a status update of the same pending member
    assert kinds(events) == [("member-ready", "ml/train")]
    gated = make_pod("w1", "u1", gang_annotation="train", min_count=2)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    cache.upsert_pod(gated)
    assert len(events) == 1  # held by a gate: not schedulable yet
    del gated["spec"]["schedulingGates"]
    cache.upsert_pod(gated)
    assert kinds(events)[-1] == ("member-ready", "ml/train")
    assert events[-1].pod is not None and events[-1].pod.uid == "u1"


# --------------------------------------------------------------------------- hostile objects


def test_relist_with_bad_objects_loads_every_other_object(cache: ClusterCache) -> None:
    negative = make_pod("neg", "u-neg", cpu="-1")
    garbage = make_pod("garbage", "u-garbage", memory="12x")
    good = [make_pod("w0", "u0", node=N0, phase="Running"), make_pod("w1", "u1")]
    rejected = cache.replace_pods([negative, good[0], garbage, "not an object", good[1]])
    assert sorted(cache.pods) == ["u0", "u1"]
    assert cache.synced["pods"] is True
    assert [obj if isinstance(obj, str) else obj["metadata"]["name"] for obj, _ in rejected] == [
        "neg", "garbage", "not an object"]
    assert all(isinstance(exc, QuantityError) for _, exc in rejected[:2])
    assert cache.node_used[N0]["cpu"] == 8000


def test_rejected_pod_keeps_its_last_good_record(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("w0", "u0", node=N0, phase="Running"))
    cache.replace_pods([make_pod("w0", "u0", node=N0, phase="Running", cpu="-1")])
    assert cache.pods["u0"].requests["cpu"] == 8000  # neither dropped nor half-applied
    assert cache.node_pod_count[N0] == 1


def test_relist_with_bad_nodes_and_podgroups_loads_the_others() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    bad_node = make_node(N1, "b0", "b0-r0", cpu="-64")
    rejected = cache.replace_nodes([bad_node, make_node(N0, "b0", "b0-r0")])
    assert [obj["metadata"]["name"] for obj, _ in rejected] == [N1]
    assert sorted(cache.nodes) == [N0]
    bad_group = make_podgroup("broken", 2)
    bad_group["spec"]["schedulingPolicy"]["gang"]["minCount"] = "many"
    rejected = cache.replace_podgroups([bad_group, make_podgroup("train-a", 2), ["not", "an", "object"]])
    assert len(rejected) == 2
    assert sorted(cache.podgroup_specs) == ["ml/train-a"]
    assert cache.synced == {"nodes": True, "pods": False, "podgroups": True}


def test_clamped_quantities_are_reported_once_per_object() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    seen: list[tuple[str, str, list[str]]] = []
    cache.on_clamped = lambda kind, key, names: seen.append((kind, key, names))
    cache.replace_nodes([make_node(N0, "b0", "b0-r0")])
    hostile = make_pod("hog", "u-hog", namespace="elsewhere", cpu="1e999999", memory="1e999999")
    cache.upsert_pod(hostile)
    cache.upsert_pod(copy.deepcopy(hostile))  # a status update: not reported again
    cache.replace_pods([hostile, make_pod("w0", "u0")])  # nor by a relist
    assert seen == [("pods", "elsewhere/hog", ["cpu", "memory"])]
    assert cache.pods["u-hog"].requests["cpu"] == MAX_UNITS
    cache.upsert_node(make_node(N0, "b0", "b0-r0", cpu="9" * 40))
    assert seen[-1] == ("nodes", N0, ["cpu"])


def test_clamped_pod_never_fits_and_is_held_against_its_node(cache: ClusterCache) -> None:
    cache.upsert_pod(make_pod("hog", "u-hog", node=N0, phase="Pending", cpu="1e999999"))
    free, _ = cache.free_on(cache.nodes[N0])
    assert free["cpu"] < 0  # its node looks full, and the arithmetic stayed on small ints
    cache.delete_pod(make_pod("hog", "u-hog"))
    assert cache.free_on(cache.nodes[N0])[0] == cache.nodes[N0].allocatable


# --------------------------------------------------------------------------- synced event


def test_caches_synced_emitted_when_the_last_kind_syncs() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    seen: list[CacheEvent] = []
    cache.listeners.append(seen.append)
    cache.replace_nodes(topology_nodes())
    cache.replace_pods([])
    assert [e for e in seen if e.kind == CACHES_SYNCED] == []
    cache.replace_podgroups([])
    assert [e.kind for e in seen if e.kind == CACHES_SYNCED] == [CACHES_SYNCED]
    cache.replace_pods([make_pod("w0", "u0")])  # a relist while in sync: nothing new
    cache.set_synced("nodes", True)
    assert [e.kind for e in seen].count(CACHES_SYNCED) == 1
    cache.set_synced("pods", False)  # a watch went down
    cache.set_synced("nodes", False)
    cache.set_synced("pods", True)
    assert [e.kind for e in seen].count(CACHES_SYNCED) == 1
    cache.set_synced("nodes", True)  # ... and everything is current again
    assert [e.kind for e in seen].count(CACHES_SYNCED) == 2
    assert seen[-1] == CacheEvent(CACHES_SYNCED, "")


# --------------------------------------------------------------------------- bounded state


def test_usage_entries_go_with_the_pods(cache: ClusterCache) -> None:
    for i in range(50):
        pod = make_pod(f"w{i}", f"u{i}", node=f"ghost-{i}", phase="Running")  # nodes never seen
        cache.upsert_pod(pod)
        cache.delete_pod(pod)
    pod = make_pod("w", "u", node=N0, phase="Running")
    cache.upsert_pod(pod)
    cache.upsert_pod(bound(pod, N0, phase="Succeeded"))
    assert dict(cache.node_used) == {}
    assert dict(cache.node_pod_count) == {}


def test_free_capacity_is_not_kept_for_a_node_that_is_gone(cache: ClusterCache) -> None:
    node = cache.nodes[N0]
    cache.free_on(node)
    cache.delete_node(N0)
    assert N0 not in cache._free
    cache.free_on(node)  # a caller still holding the old record
    assert N0 not in cache._free
    assert set(cache._free) <= set(cache.nodes)


def test_annotation_specs_go_with_the_last_member(cache: ClusterCache) -> None:
    for i in range(20):
        pod = make_pod(f"w{i}", f"u{i}", gang_annotation=f"gang-{i}", min_count=1)
        cache.upsert_pod(pod)
        cache.upsert_pod(make_pod(f"w{i}", f"u{i}"))  # left the gang by an update
    cache.replace_pods([make_pod("x", "ux", gang_annotation="kept", min_count=1)])
    assert list(cache.annotation_specs) == ["ml/kept"]
    assert list(cache.gang_members) == ["ml/kept"]
    cache.replace_pods([])
    assert cache.annotation_specs == {}
    assert dict(cache.gang_members) == {}
