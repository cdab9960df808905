"""JobSet gangs with no PodGroup (cluster/jobsets.py): the JobSet's annotation picks the level, its
spec gives the sizes, its restart attempt separates the attempts, and pods delivered before their
JobSet wait for it."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.adapters.wire import parse_extender_args
from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import GANG_CHANGED, CacheEvent
from extender.cluster.jobsets import JOBSETS, specs_from_jobset
from extender.cluster.object_sources import GANG_OBJECT_KINDS

from .fixtures import LEVEL_LABELS, RACK, World, gang_pod, schedule
from .payloads import extender_args

SOURCE = next(kind for kind in GANG_OBJECT_KINDS if kind.name == JOBSETS).source("jobset.x-k8s.io/v1alpha2")


def jobset(name: str = "trainer", *, level: str | None = "jobset", targets: str | None = None,
           jobs: dict[str, tuple[int, int]] | None = None, restarts: int = 0,
           **annotations: str) -> dict[str, Any]:
    """A JobSet: per replicated job (replicas, parallelism)."""
    notes = {key.replace("_", "-"): value for key, value in annotations.items()}
    notes = {f"quorum.dev/{key}": value for key, value in notes.items()}
    if level is not None:
        notes["quorum.dev/jobset-gang"] = level
    if targets is not None:
        notes["quorum.dev/jobset-gang-replicated-jobs"] = targets
    replicated = [{"name": rjob, "replicas": replicas,
                   "template": {"spec": {"parallelism": pods, "completions": pods}}}
                  for rjob, (replicas, pods) in (jobs or {"workers": (2, 2)}).items()]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-js-{name}", "annotations": notes},
            "spec": {"replicatedJobs": replicated}, "status": {"restarts": restarts}}


def member(name: str, rjob: str = "workers", job: int = 0, attempt: int = 0, jobset_name: str = "trainer",
           **kw: Any) -> dict[str, Any]:
    pod = gang_pod(name, **kw)
    pod["metadata"]["labels"] = {
        "jobset.sigs.k8s.io/jobset-name": jobset_name, "jobset.sigs.k8s.io/replicatedjob-name": rjob,
        "jobset.sigs.k8s.io/job-index": str(job), "jobset.sigs.k8s.io/restart-attempt": str(attempt)}
    return pod


def members(cache: ClusterCache, key: str) -> list[str]:
    return sorted(m.name for m in cache.members(key))


WHOLE = "ml/trainer/attempt.0"


def test_the_whole_jobset_is_one_gang_sized_from_its_spec() -> None:
    specs = specs_from_jobset(jobset(jobs={"driver": (1, 1), "workers": (3, 2)},
                                     required_topology=RACK), "jobset.x-k8s.io/v1alpha2")
    spec = specs[WHOLE]
    assert (spec.min_count, spec.is_gang, spec.required_topology, spec.problem) == (7, True, RACK, "")
    assert spec.home is not None and (spec.home.kind, spec.home.name) == ("JobSet", "trainer")


def test_targeted_replicated_jobs_form_the_gang_and_the_rest_schedule_on_their_own() -> None:
    specs = specs_from_jobset(jobset(targets="workers", jobs={"driver": (1, 1), "workers": (3, 2)}), "")
    assert specs[WHOLE].min_count == 6
    driver = specs["ml/trainer/driver/attempt.0"]
    assert not driver.is_gang


def test_one_gang_per_job_replica() -> None:
    specs = specs_from_jobset(jobset(level="job", jobs={"workers": (3, 4)}), "")
    gangs = {key: spec.min_count for key, spec in specs.items() if spec.is_gang}
    assert gangs == {f"ml/trainer/workers.{i}/attempt.0": 4 for i in range(3)}
    assert not specs[WHOLE].is_gang  # where its pods waited before the JobSet was known


def test_a_jobset_that_asks_for_no_gang_declares_its_pods_basic() -> None:
    specs = specs_from_jobset(jobset(level=None), "")
    assert list(specs) == [WHOLE] and not specs[WHOLE].is_gang


def test_a_wrong_level_or_target_is_a_misconfigured_gang_not_a_guess() -> None:
    assert "neither" in specs_from_jobset(jobset(level="replica"), "")[WHOLE].problem
    assert "no replicated job ps" in specs_from_jobset(jobset(targets="ps"), "")[WHOLE].problem


def test_a_hostile_replica_count_is_bounded() -> None:
    specs = specs_from_jobset(jobset(level="job", jobs={"workers": (2**30, 1)}), "")
    assert len(specs) <= 10_001


def test_the_cache_files_pods_by_their_jobsets_policy_and_wakes_them_when_it_arrives() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    seen: list[CacheEvent] = []
    cache.listeners.append(seen.append)
    for i in range(4):
        cache.upsert_pod(member(f"t{i}", job=i // 2))
    assert members(cache, WHOLE) == ["t0", "t1", "t2", "t3"]
    assert cache.gang_spec(WHOLE) is None, "its JobSet is not known yet: the pods wait undeclared"
    cache.upsert_gang_object(SOURCE, jobset(level="job"))
    assert members(cache, "ml/trainer/workers.0/attempt.0") == ["t0", "t1"]
    assert members(cache, "ml/trainer/workers.1/attempt.0") == ["t2", "t3"]
    assert members(cache, WHOLE) == []
    changed = {e.key for e in seen if e.kind == GANG_CHANGED}
    assert {"ml/trainer/workers.0/attempt.0", "ml/trainer/workers.1/attempt.0"} <= changed
    cache.upsert_gang_object(SOURCE, jobset(level="jobset"))  # the annotation edited
    assert members(cache, WHOLE) == ["t0", "t1", "t2", "t3"]
    spec = cache.gang_spec(WHOLE)
    assert spec is not None and spec.min_count == 4


def test_a_restart_makes_fresh_gangs_and_the_old_attempts_pods_never_count() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_gang_object(SOURCE, jobset(restarts=1))
    cache.upsert_pod(member("old", attempt=0))
    for i in range(2):
        cache.upsert_pod(member(f"new{i}", attempt=1))
    assert members(cache, "ml/trainer/attempt.1") == ["new0", "new1"]
    assert members(cache, WHOLE) == ["old"]
    assert cache.gang_spec(WHOLE) is None, "no gang is declared for an attempt that is over"


def test_a_pod_that_names_its_own_gang_keeps_it() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_gang_object(SOURCE, jobset())
    cache.upsert_pod(member("a0", gang="own", min_count=1))
    assert members(cache, "ml/own") == ["a0"]


def test_where_jobsets_are_not_served_their_pods_are_plain_and_held_again_once_they_are() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_pod(member("t0"))
    cache.replace_gang_objects(SOURCE.__class__(JOBSETS, SOURCE.parse), [])  # found not served
    assert cache.pods["uid-t0"].gang_key is None
    cache.upsert_pod(member("t1"))
    assert cache.pods["uid-t1"].gang_key is None
    cache.replace_gang_objects(SOURCE, [jobset()])
    assert members(cache, WHOLE) == ["t0", "t1"]


def test_the_wire_carries_a_jobset_pods_place_and_the_gang_is_resolved_before_the_watch() -> None:
    record = parse_extender_args(extender_args(member("t0"), names=["b0-r0-n0"])).pod
    assert record.gang_key is None and record.jobset is not None
    assert (record.jobset.jobset_key, record.jobset.replicated_job) == ("ml/trainer", "workers")
    own = parse_extender_args(extender_args(member("t1", gang="own", min_count=1), names=["b0-r0-n0"])).pod
    assert own.jobset is None
    world = World()
    world.cache.upsert_gang_object(SOURCE, jobset())
    world.pods["t0"] = member("t0", gpus=8)  # in the request only
    decision = world.filter("t0")
    assert decision.passing == [], "a member of a gang of four bound alone"
    assert WHOLE in decision.reason, decision.reason


async def test_a_jobset_gang_binds_whole_in_one_rack() -> None:
    world = World()
    world.cache.upsert_gang_object(SOURCE, jobset(jobs={"workers": (2, 1)}, required_topology=RACK))
    world.add(member("t0", gpus=8))
    assert world.filter("t0").passing == []
    world.add(member("t1", job=1, gpus=8))
    placed = await schedule(world, ["t0", "t1"])
    assert len({world.rack_of(node) for node in placed.values()}) == 1, placed
    assert world.coordinator.check_invariants() == []


async def test_a_jobset_with_no_gang_binds_pod_by_pod() -> None:
    world = World()
    world.add(member("t0", gpus=8))
    held = world.filter("t0")
    assert held.passing == [], "held while its JobSet is unknown"
    assert f"gang {WHOLE}: waiting for its JobSet to exist" in held.reason, held.reason
    world.cache.upsert_gang_object(SOURCE, jobset(level=None))
    assert world.filter("t0").passing, world.coordinator.reason_of(WHOLE)
    await asyncio.sleep(0)  # the nudge is sent from a task
    assert "t0" in [name for pods, _ in world.actions.requeues for name in pods], world.actions.requeues


async def test_pods_held_for_a_jobset_are_woken_when_jobsets_turn_out_not_served() -> None:
    world = World()
    world.add(member("t0", gpus=8))
    assert world.filter("t0").passing == [], "held while its JobSet is unknown"
    world.cache.replace_gang_objects(SOURCE.__class__(JOBSETS, SOURCE.parse), [])  # not served
    assert world.filter("t0").passing, "an ordinary pod now"
    await asyncio.sleep(0)
    assert world.actions.requeued == ["t0"], world.actions.requeues
