"""A basic PodGroup does not take a pod out of the gang its own labels name (cluster/basic_groups.py).

With ``WorkloadWithJob`` the Job controller writes a basic PodGroup for every Job that names none,
and points its pods' ``spec.schedulingGroup`` at it; Quorum's annotations on those pods must keep
meaning a gang, whichever of the pods and the PodGroup the watch delivers first.
"""

from __future__ import annotations

from extender.adapters.wire import parse_extender_args
from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import MEMBER_READY, CacheEvent

from .fixtures import LEVEL_LABELS, World, gang_pod, make_podgroup, schedule
from .payloads import extender_args

JOB_GROUP = "train-pg-0"  # the PodGroup the Job controller names


def members(cache: ClusterCache, key: str) -> list[str]:
    return sorted(m.name for m in cache.members(key))


def annotated(name: str, podgroup: str | None = JOB_GROUP) -> dict:
    return gang_pod(name, gang="train", min_count=2, podgroup=podgroup, gpus=8)


def test_a_pod_of_a_basic_podgroup_is_in_the_gang_its_annotations_name() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_podgroup(make_podgroup(JOB_GROUP, None))
    for name in ("t0", "t1"):
        cache.upsert_pod(annotated(name))
    assert members(cache, "ml/train") == ["t0", "t1"]
    assert members(cache, f"ml/{JOB_GROUP}") == []
    spec = cache.gang_spec("ml/train")
    assert spec is not None and spec.is_gang and spec.min_count == 2


def test_a_gang_podgroup_keeps_its_pods_whatever_their_annotations_say() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_podgroup(make_podgroup(JOB_GROUP, 3))
    cache.upsert_pod(annotated("t0"))
    assert members(cache, f"ml/{JOB_GROUP}") == ["t0"]
    assert members(cache, "ml/train") == []


def test_pods_delivered_before_their_basic_podgroup_move_when_it_comes_and_back_when_it_goes() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    seen: list[CacheEvent] = []
    cache.listeners.append(seen.append)
    for name in ("t0", "t1"):
        cache.upsert_pod(annotated(name))
    assert members(cache, f"ml/{JOB_GROUP}") == ["t0", "t1"]  # its PodGroup may be a gang: wait
    seen.clear()
    group = make_podgroup(JOB_GROUP, None)
    cache.upsert_podgroup(group)
    assert members(cache, "ml/train") == ["t0", "t1"]
    assert members(cache, f"ml/{JOB_GROUP}") == []
    assert {(e.kind, e.key) for e in seen if e.kind == MEMBER_READY} == {(MEMBER_READY, "ml/train")}
    cache.delete_podgroup(group)
    assert members(cache, f"ml/{JOB_GROUP}") == ["t0", "t1"]
    cache.upsert_podgroup(make_podgroup(JOB_GROUP, 2))  # recreated as a gang
    assert members(cache, f"ml/{JOB_GROUP}") == ["t0", "t1"]
    assert members(cache, "ml/train") == []


def test_a_pod_with_no_gang_of_its_own_stays_in_its_basic_podgroup_and_nothing_is_kept() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_podgroup(make_podgroup(JOB_GROUP, None))
    plain = gang_pod("p0", podgroup=JOB_GROUP)
    cache.upsert_pod(plain)
    assert members(cache, f"ml/{JOB_GROUP}") == ["p0"]
    assert cache.filing.basic_groups.misfiled([f"ml/{JOB_GROUP}"]) == []
    cache.upsert_pod(annotated("t0"))
    cache.delete_pod(annotated("t0"))
    assert cache.filing.basic_groups.misfiled([f"ml/{JOB_GROUP}"]) == []
    assert not cache.filing.basic_groups._naming  # a deleted pod is not kept


async def test_an_annotated_gang_under_a_basic_podgroup_binds_whole_or_not_at_all() -> None:
    world = World()
    world.cache.upsert_podgroup(make_podgroup(JOB_GROUP, None))
    world.add(annotated("t0"))
    decision = world.filter("t0")
    assert decision.passing == [], "one member of a gang of two binds nothing"
    assert "gang ml/train: 1/2 pods exist" in decision.reason, decision.reason
    world.add(annotated("t1"))
    placed = await schedule(world, ["t0", "t1"])
    assert len(placed) == 2
    assert world.coordinator.check_invariants() == []


def test_a_pod_the_watch_has_not_delivered_is_judged_in_the_gang_its_annotations_name() -> None:
    """kube-scheduler has the pod before Quorum's watch does: its request names the basic PodGroup,
    and a basic PodGroup lets any pod pass. It must be held as a member of its annotations' gang."""
    world = World()
    world.cache.upsert_podgroup(make_podgroup(JOB_GROUP, None))
    world.pods["t0"] = annotated("t0")  # in the request only
    decision = world.filter("t0")
    assert decision.passing == [], "a member of a gang of two bound alone"
    assert "ml/train" in decision.reason, decision.reason


def test_the_wire_carries_the_gang_a_basic_podgroup_yields_to() -> None:
    body = extender_args(annotated("t0"), names=["b0-r0-n0"])
    record = parse_extender_args(body).pod
    assert (record.gang_key, record.yielding_gang) == (f"ml/{JOB_GROUP}", "ml/train")
    plain = parse_extender_args(extender_args(gang_pod("p0", podgroup=JOB_GROUP), names=["b0-r0-n0"])).pod
    assert plain.yielding_gang is None
