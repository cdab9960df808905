"""Every gang convention read into one GangSpec, and which one wins (cluster/conventions.py,
cluster/declarations.py), through the cache as the informer feeds it."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import GANG_CHANGED, GANG_REMOVED, CacheEvent
from extender.cluster.conventions import (
    declared_by_pod,
    gang_key_of_pod,
    spec_from_composite,
    spec_from_crd_podgroup,
    spec_from_native_podgroup,
    specs_from_workload_v1alpha1,
    topology_of_pod,
)
from extender.cluster.gang_sources import read_condition_type, written_condition_type
from extender.cluster.object_sources import GANG_OBJECT_KINDS
from extender.cluster.records import GangHome

from .fixtures import LEVEL_LABELS, World, make_pod, make_podgroup, schedule

KINDS = {kind.name: kind for kind in GANG_OBJECT_KINDS}
V1ALPHA2 = KINDS["podgroups"].source("scheduling.k8s.io/v1alpha2")
WORKLOADS = KINDS["workloads"].source("scheduling.k8s.io/v1alpha1")
COSCHEDULING = KINDS["coscheduling"].source("scheduling.x-k8s.io/v1alpha1")
VOLCANO = KINDS["volcano"].source("scheduling.volcano.sh/v1beta1")


def pod(name: str = "p0", uid: str = "u0", *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    obj = make_pod(name, uid, annotations=annotations)
    obj["metadata"]["labels"] = dict(labels or {})
    obj["spec"].update(spec)
    return obj


def workload(name: str, *groups: tuple[str, int | None]) -> dict[str, Any]:
    """A scheduling.k8s.io/v1alpha1 Workload (1.35); a count of None is the basic policy."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-01-02T03:04:05Z"},
            "spec": {"podGroups": [
                {"name": g, "policy": {"basic": {}} if n is None else {"gang": {"minCount": n}}}
                for g, n in groups]}}


def crd_podgroup(api: str, name: str, min_member: Any, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"minMember": min_member, **spec}}


@pytest.fixture
def cache() -> tuple[ClusterCache, list[CacheEvent]]:
    c = ClusterCache(LEVEL_LABELS)
    seen: list[CacheEvent] = []
    c.listeners.append(seen.append)
    return c, seen


# --- which gang a pod is in --------------------------------------------------------------------
@pytest.mark.parametrize(("labels", "annotations", "spec", "key"), [
    ({}, {}, {"schedulingGroup": {"podGroupName": "native"}}, "ml/native"),
    ({}, {}, {"workloadRef": {"name": "job", "podGroup": "workers"}}, "ml/job/workers"),
    ({}, {}, {"workloadRef": {"name": "job", "podGroup": "workers", "podGroupReplicaKey": "2"}},
     "ml/job/workers/2"),
    ({"scheduling.x-k8s.io/pod-group": "cosched"}, {}, {}, "ml/cosched"),
    ({}, {"scheduling.k8s.io/group-name": "vc"}, {}, "ml/vc"),
    ({}, {"gang.scheduling.koordinator.sh/name": "koord"}, {}, "ml/koord"),
    ({"kueue.x-k8s.io/pod-group-name": "kq"}, {}, {}, "ml/kq"),
    ({}, {}, {}, None),
])
def test_each_convention_names_the_gang(labels: dict[str, str], annotations: dict[str, str],
                                        spec: dict[str, Any], key: str | None) -> None:
    assert gang_key_of_pod(pod(labels=labels, annotations=annotations, **spec)) == key


def test_a_pod_with_several_conventions_belongs_to_the_first() -> None:
    every = pod(labels={"scheduling.x-k8s.io/pod-group": "cosched"},
                annotations={"quorum.dev/gang": "mine", "scheduling.k8s.io/group-name": "vc"},
                schedulingGroup={"podGroupName": "native"})
    assert gang_key_of_pod(every) == "ml/native"
    del every["spec"]["schedulingGroup"]
    assert gang_key_of_pod(every) == "ml/mine"
    del every["metadata"]["annotations"]["quorum.dev/gang"]
    assert gang_key_of_pod(every) == "ml/cosched"
    del every["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"]
    assert gang_key_of_pod(every) == "ml/vc"


# --- what a pod declares by itself ---------------------------------------------------------------
def test_koordinator_and_kueue_pods_carry_their_size() -> None:
    koord = declared_by_pod(pod(annotations={"gang.scheduling.koordinator.sh/name": "k",
                                             "gang.scheduling.koordinator.sh/min-available": "3"}))
    assert koord is not None and (koord.key, koord.min_count, koord.problem) == ("ml/k", 3, "")
    kueue = declared_by_pod(pod(labels={"kueue.x-k8s.io/pod-group-name": "q"},
                                annotations={"kueue.x-k8s.io/pod-group-total-count": "zero"}))
    assert kueue is not None and kueue.problem.startswith("kueue.x-k8s.io/pod-group-total-count 'zero'")
    # Volcano and coscheduling pods name their gang; its size is on the PodGroup object.
    assert declared_by_pod(pod(annotations={"scheduling.k8s.io/group-name": "vc"})) is None


def test_kueue_topology_annotations() -> None:
    both = topology_of_pod(pod(annotations={
        "kueue.x-k8s.io/podset-required-topology": "topology.quorum.dev/block",
        "kueue.x-k8s.io/podset-slice-required-topology": "topology.quorum.dev/rack",
        "kueue.x-k8s.io/podset-slice-size": "4"}))
    assert both is not None
    assert (both.required, both.slice_topology, both.slice_size, both.problem) == (
        "topology.quorum.dev/block", "topology.quorum.dev/rack", 4, "")
    preferred = topology_of_pod(pod(annotations={"kueue.x-k8s.io/podset-preferred-topology": "rack"}))
    assert preferred is not None and (preferred.required, preferred.preferred) == (None, "rack")
    loose = topology_of_pod(pod(annotations={"kueue.x-k8s.io/podset-unconstrained-topology": "true",
                                             "kueue.x-k8s.io/podset-preferred-topology": "rack"}))
    assert loose is None
    no_size = topology_of_pod(pod(annotations={"kueue.x-k8s.io/podset-slice-required-topology": "rack"}))
    assert no_size is not None and "podset-slice-size" in no_size.problem


# --- objects ---------------------------------------------------------------------------------------
def test_v1alpha1_workload_declares_one_gang_per_podgroup() -> None:
    specs = specs_from_workload_v1alpha1(workload("job", ("workers", 4), ("driver", None)))
    assert sorted(specs) == ["ml/job/driver", "ml/job/workers"]
    assert (specs["ml/job/workers"].min_count, specs["ml/job/workers"].is_gang) == (4, True)
    assert specs["ml/job/driver"].is_gang is False
    assert specs["ml/job/workers"].home is None  # one object, several gangs: bookkeeping on members


def test_coscheduling_podgroup() -> None:
    spec = spec_from_crd_podgroup(crd_podgroup(
        "scheduling.x-k8s.io/v1alpha1", "train", 3, scheduleTimeoutSeconds=20,
        minResources={"cpu": "24", "nvidia.com/gpu": "6", "pods": "3"}), "scheduling.x-k8s.io/v1alpha1")
    assert (spec.key, spec.min_count, spec.bind_timeout, spec.problem) == ("ml/train", 3, 20.0, "")
    assert dict(spec.min_resources) == {"cpu": 24000, "nvidia.com/gpu": 6}
    assert spec.home == GangHome("scheduling.x-k8s.io/v1alpha1", "PodGroup", "podgroups", "ml", "train")
    bad = spec_from_crd_podgroup(crd_podgroup("scheduling.volcano.sh/v1beta1", "vc", 0),
                                 "scheduling.volcano.sh/v1beta1")
    assert bad.problem == "spec.minMember '0' is not a positive integer"


# --- through the cache: precedence, replicas, events --------------------------------------------
def test_object_precedence_native_then_coscheduling_then_volcano_then_members(cache: Any) -> None:
    c, _ = cache
    c.upsert_pod(pod(annotations={"quorum.dev/gang": "g", "quorum.dev/min-count": "1"}))
    assert c.gang_spec("ml/g").min_count == 1
    c.upsert_gang_object(VOLCANO, crd_podgroup("scheduling.volcano.sh/v1beta1", "g", 2))
    assert c.gang_spec("ml/g").min_count == 2
    c.upsert_gang_object(COSCHEDULING, crd_podgroup("scheduling.x-k8s.io/v1alpha1", "g", 3))
    assert c.gang_spec("ml/g").min_count == 3
    c.upsert_gang_object(V1ALPHA2, make_podgroup("g", 4))
    spec = c.gang_spec("ml/g")
    assert spec.min_count == 4 and spec.home is not None and spec.home.api_version.endswith("v1alpha2")
    c.delete_gang_object(V1ALPHA2, make_podgroup("g", 4))
    c.delete_gang_object(COSCHEDULING, crd_podgroup("scheduling.x-k8s.io/v1alpha1", "g", 3))
    assert c.gang_spec("ml/g").min_count == 2


def test_replica_gangs_share_their_podgroup_spec_and_events(cache: Any) -> None:
    c, seen = cache
    for replica in ("0", "1"):
        c.upsert_pod(pod(f"p{replica}", f"u{replica}",
                         workloadRef={"name": "job", "podGroup": "w", "podGroupReplicaKey": replica}))
    assert c.gang_spec("ml/job/w/0") is None  # waiting for its Workload
    c.upsert_gang_object(WORKLOADS, workload("job", ("w", 1)))
    assert [c.gang_spec(k).min_count for k in ("ml/job/w/0", "ml/job/w/1")] == [1, 1]
    assert c.gang_spec("ml/job/w/1").key == "ml/job/w/1"
    changed = {e.key for e in seen if e.kind == GANG_CHANGED}
    assert changed == {"ml/job/w", "ml/job/w/0", "ml/job/w/1"}
    seen.clear()
    c.upsert_gang_object(WORKLOADS, workload("job", ("other", 2)))  # podGroup w removed
    assert {e.key for e in seen if e.kind == GANG_REMOVED} == {"ml/job/w", "ml/job/w/0", "ml/job/w/1"}
    assert c.gang_spec("ml/job/w/0") is None


def test_member_topology_fills_what_the_object_leaves_open(cache: Any) -> None:
    c, seen = cache
    c.upsert_gang_object(COSCHEDULING, crd_podgroup("scheduling.x-k8s.io/v1alpha1", "g", 2))
    member = pod(labels={"scheduling.x-k8s.io/pod-group": "g"}, annotations={
        "kueue.x-k8s.io/podset-required-topology": "topology.quorum.dev/block",
        "kueue.x-k8s.io/podset-slice-required-topology": "topology.quorum.dev/rack",
        "kueue.x-k8s.io/podset-slice-size": "2"})
    seen.clear()
    c.upsert_pod(member)
    spec = c.gang_spec("ml/g")
    assert (spec.required_topology, spec.slice_topology, spec.slice_size) == (
        "topology.quorum.dev/block", "topology.quorum.dev/rack", 2)
    assert [e.key for e in seen if e.kind == GANG_CHANGED] == ["ml/g"]  # the declaration moved
    # A native PodGroup's own constraint wins over the members' annotations.
    c.upsert_gang_object(V1ALPHA2, make_podgroup("g", 2, topology_key="topology.quorum.dev/rack"))
    assert c.gang_spec("ml/g").required_topology == "topology.quorum.dev/rack"
    moved = copy.deepcopy(member)
    moved["metadata"]["annotations"]["kueue.x-k8s.io/podset-slice-size"] = "1"
    c.upsert_pod(moved)
    assert c.gang_spec("ml/g").slice_size == 1


# --- through the coordinator ---------------------------------------------------------------------
def test_min_resources_answer_before_any_placement() -> None:
    world = World()
    world.cache.upsert_gang_object(COSCHEDULING, crd_podgroup(
        "scheduling.x-k8s.io/v1alpha1", "big", 2, minResources={"nvidia.com/gpu": "1000"}))
    for i in range(2):
        world.add(pod(f"big{i}", f"uid-big{i}", labels={"scheduling.x-k8s.io/pod-group": "big"}))
    decision = world.filter("big0")
    assert decision.passing == []
    assert "needs minResources {nvidia.com/gpu: 1000}; candidate nodes have {nvidia.com/gpu: 64}" in \
        world.coordinator.reason_of("ml/big")


def test_schedule_timeout_shortens_the_bind_timeout_only() -> None:
    world = World()
    for name, timeout in (("short", 5), ("long", 3600)):
        world.cache.upsert_gang_object(COSCHEDULING, crd_podgroup(
            "scheduling.x-k8s.io/v1alpha1", name, 2, scheduleTimeoutSeconds=timeout))
    core = world.coordinator.core
    assert core.bind_timeout("ml/short") == 5.0
    assert core.bind_timeout("ml/long") == core.config.gang.bind_timeout_seconds


async def test_kueue_slices_shape_the_reservation() -> None:
    """Racks with 3 free nodes each: a gang of 4 whole-node members packed without slices takes
    3 + 1; in slices of 2 per rack it takes 2 + 2."""
    world = World(nodes_per_rack=4)
    busy = ["b0-r0-n3", "b0-r1-n3"] + [n for n in world.names if n.startswith("b1-")]
    for i, node in enumerate(busy):
        world.add(make_pod(f"busy{i}", f"uid-busy{i}", node=node, phase="Running", gpus=8))
    annotations = {"kueue.x-k8s.io/pod-group-total-count": "4",
                   "kueue.x-k8s.io/podset-required-topology": "topology.quorum.dev/block",
                   "kueue.x-k8s.io/podset-slice-required-topology": "topology.quorum.dev/rack",
                   "kueue.x-k8s.io/podset-slice-size": "2"}
    names = [f"s{i}" for i in range(4)]
    for name in names:
        world.add(pod(name, f"uid-{name}", labels={"kueue.x-k8s.io/pod-group-name": "sliced"},
                      annotations=annotations, containers=[{"name": "main", "image": "pause", "resources": {
                          "requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}}}]))
    nodes = await schedule(world, names)
    per_rack = sorted(Counter(world.rack_of(node) for node in nodes.values()).values())
    assert per_rack == [2, 2], nodes



def test_the_conditions_a_podgroup_shows_are_read_and_a_composites_are_named_as_a_podgroups() -> None:
    """Quorum compares what the object shows with what it applied (reporting.conditions_shown)."""
    group = make_podgroup("g", 2)
    group["status"] = {"conditions": [
        {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable", "message": "m"},
        {"type": "quorum.dev/PodsReady", "status": "True", "reason": "PodsReady"},
        "not a condition", {"status": "True"}, {"type": 7}]}
    assert spec_from_native_podgroup(group, "scheduling.k8s.io/v1beta1").shown == (
        ("PodGroupInitiallyScheduled", False, "Unschedulable", "m"),
        ("quorum.dev/PodsReady", True, "PodsReady", ""))
    composite = {"metadata": {"namespace": "ml", "name": "c"}, "spec": {},
                 "status": {"conditions": [{"type": "CompositePodGroupInitiallyScheduled", "status": "True",
                                            "reason": "Scheduled", "message": "ok"}]}}
    assert spec_from_composite(composite, "scheduling.k8s.io/v1alpha3").shown == (
        ("PodGroupInitiallyScheduled", True, "Scheduled", "ok"),)
    group["status"] = {"conditions": {"not": "a list"}}
    assert spec_from_native_podgroup(group, "scheduling.k8s.io/v1beta1").shown == ()


@pytest.mark.parametrize("condition", ["PodGroupInitiallyScheduled", "PodGroupSatisfied",
                                       "quorum.dev/PodsReady", "quorum.dev/Preempted"])
@pytest.mark.parametrize("kind", ["PodGroup", "CompositePodGroup"])
def test_a_condition_written_to_either_kind_reads_back_under_its_own_name(kind: str, condition: str) -> None:
    """What Quorum writes and what it reads back must name a condition the same way, or its own
    condition on a CompositePodGroup would look replaced by another writer and be put back forever."""
    written = written_condition_type(kind, condition)
    if kind == "CompositePodGroup" and condition.startswith("PodGroup"):
        assert written == "Composite" + condition  # upstream's name on that kind
    else:
        assert written == condition
    assert read_condition_type(written) == condition
