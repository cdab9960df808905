"""``scheduling.k8s.io/v1`` (Workload and PodGroup GA, planned for 1.38): discovery takes it when
served, in preference to v1beta1, and its PodGroups are gangs whose conditions go to the v1 path.

v1 is assumed to keep v1beta1's shape (k8s.io/api v0.38.0-alpha.2 has no Workload or PodGroup in
``scheduling/v1`` yet): the objects below are the v1beta1 fixtures with only their apiVersion changed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from extender.adapters.informer import ABSENT, Informer
from extender.adapters.kube import ApiError
from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import GANG_REMOVED, CacheEvent
from extender.cluster.object_sources import GANG_OBJECT_KINDS
from extender.gang.effects import GangCondition
from extender.metrics import Metrics

from .fake_apiserver import FakeApiserver
from .fixtures import LEVEL_LABELS, KubeWorld, make_podgroup

V1 = "scheduling.k8s.io/v1"
V1BETA1 = "scheduling.k8s.io/v1beta1"


def v1_podgroup(name: str, min_count: int, **kw: Any) -> dict[str, Any]:
    obj = make_podgroup(name, min_count, **kw)
    obj["apiVersion"] = V1
    obj["metadata"]["resourceVersion"] = "7"
    return obj


async def eventually(condition: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def informed() -> AsyncIterator[Callable[..., tuple[Informer, ClusterCache]]]:
    started: list[Informer] = []

    def start(client: FakeApiserver, absent_retry: float = 0.05) -> tuple[Informer, ClusterCache]:
        cache = ClusterCache(LEVEL_LABELS)
        informer = Informer(client, cache, Metrics(), absent_retry=absent_retry)  # type: ignore[arg-type]
        informer.start()
        started.append(informer)
        return informer, cache

    yield start
    for informer in started:
        await informer.stop()


def test_a_v1_podgroup_is_a_gang_like_a_v1beta1_one() -> None:
    [native] = [kind for kind in GANG_OBJECT_KINDS if kind.name == "podgroups"]
    assert V1 in native.versions
    [spec] = native.source(V1).parse(v1_podgroup("trainer", 4, topology_key="topology.quorum.dev/rack",
                                                 priority=100)).values()
    assert (spec.key, spec.min_count, spec.is_gang) == ("ml/trainer", 4, True)
    assert spec.required_topology == "topology.quorum.dev/rack" and spec.priority == 100
    assert spec.source == f"{V1} PodGroup"
    assert spec.home is not None and spec.home.conditions
    assert spec.home.path == "/apis/scheduling.k8s.io/v1/namespaces/ml/podgroups/trainer"
    [basic] = native.source(V1).parse({**v1_podgroup("solo", 1), "spec": {"schedulingPolicy": {"basic": {}}}}
                                      ).values()
    assert not basic.is_gang


async def test_discovery_prefers_v1_over_v1beta1_and_conditions_go_to_the_v1_path(
    informed: Callable[..., tuple[Informer, ClusterCache]], kube: KubeWorld
) -> None:
    """1.38 is expected to serve v1 beside v1beta1 (the same objects): Quorum watches v1 alone, and
    a gang it reads there carries its conditions back through v1."""
    api = FakeApiserver()
    api.served = {V1: ["priorityclasses", "podgroups", "workloads"], V1BETA1: ["podgroups", "workloads"]}
    v1_path, beta_path = f"/apis/{V1}/podgroups", f"/apis/{V1BETA1}/podgroups"
    api.lists[v1_path] = [([v1_podgroup("trainer", 4)], "8")]
    informer, cache = informed(api)
    await eventually(lambda: "ml/trainer" in cache.podgroup_specs)
    assert informer.served["podgroups"] == V1
    assert api.lists_of(beta_path) == 0  # never listed: the same objects, seen once
    # A v1 Workload holds templates, not gangs: the 1.35 Workload (v1alpha1) is still looked for alone.
    await eventually(lambda: informer.status().get("workloads") == ABSENT)
    assert "workloads" not in informer.served

    spec = cache.gang_spec("ml/trainer")
    assert spec is not None and spec.home is not None and spec.min_count == 4
    await kube.client.set_gang_conditions(spec.home, [
        GangCondition("PodGroupSatisfied", True, "MinCountSatisfied", "4 of 4 members scheduled")])
    [request] = kube.api.requests
    assert (request.method, request.path) == ("PATCH", "/apis/scheduling.k8s.io/v1/namespaces/ml/podgroups/"
                                                        "trainer/status")
    assert request.body["apiVersion"] == V1 and request.body["kind"] == "PodGroup"
    assert request.body["status"]["conditions"][0]["type"] == "PodGroupSatisfied"


async def test_v1beta1_is_still_watched_where_v1_is_not_served(
    informed: Callable[..., tuple[Informer, ClusterCache]]
) -> None:
    """scheduling.k8s.io/v1 is served on every release, for PriorityClasses (and, as of k8s.io/api
    v0.38.0-alpha.2, for nothing else): that alone must not make it the PodGroups' version."""
    api = FakeApiserver()
    api.served = {V1: ["priorityclasses"], V1BETA1: ["podgroups", "workloads"]}
    api.lists[f"/apis/{V1BETA1}/podgroups"] = [([make_podgroup("trainer", 2)], "8")]
    informer, cache = informed(api)
    await eventually(lambda: "ml/trainer" in cache.podgroup_specs)
    assert informer.served["podgroups"] == V1BETA1
    assert api.lists_of(f"/apis/{V1}/podgroups") == 0


async def test_an_upgrade_that_stops_serving_v1beta1_moves_the_watch_to_v1_keeping_every_gang(
    informed: Callable[..., tuple[Informer, ClusterCache]]
) -> None:
    """1.37 -> 1.38 without v1beta1 in the apiserver's runtime-config: the v1beta1 watch gets 404.
    The same PodGroups are served as v1, so Quorum switches at once; it must not take the PodGroups
    for gone (releasing every reservation, forgetting every started gang) until a later look."""
    api = FakeApiserver()  # v1beta1 only
    beta_path, v1_path = f"/apis/{V1BETA1}/podgroups", f"/apis/{V1}/podgroups"
    api.lists[beta_path] = [([make_podgroup("trainer", 2)], "8")]
    informer, cache = informed(api, absent_retry=3600.0)
    removed: list[CacheEvent] = []
    cache.listeners.append(lambda e: removed.append(e) if e.kind == GANG_REMOVED else None)
    await eventually(lambda: "ml/trainer" in cache.podgroup_specs and api.watching(beta_path))

    api.served = {V1: ["priorityclasses", "podgroups", "workloads"]}
    api.lists[v1_path] = [([v1_podgroup("trainer", 2)], "20")]
    api.break_watch(beta_path, ApiError(404, "the server could not find the requested resource"))
    await eventually(lambda: api.watching(v1_path))
    assert informer.served["podgroups"] == V1
    spec = cache.gang_spec("ml/trainer")
    assert spec is not None and spec.home is not None and spec.home.api_version == V1
    assert removed == []
    assert informer.status()["podgroups"] == "watching"
