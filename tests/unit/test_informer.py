"""extender.adapters.informer.Informer against the fake apiserver's scripted lists and watches (no network,
no long sleeps)."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from extender.adapters.informer import ABSENT, BACKOFF, STOPPED, Informer, paced
from extender.adapters.kube import ApiError, Gone
from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import CACHES_SYNCED, PODS_LISTED, CacheEvent
from extender.metrics import Metrics

from .fake_apiserver import NODES, PODGROUPS, PODS, EndWatch, FakeApiserver
from .fixtures import LEVEL_LABELS, bound, make_node, make_pod, make_podgroup

pytestmark = pytest.mark.event_loops


def with_rv(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = rv
    return obj


def event(kind: str, obj: dict[str, Any], rv: str) -> dict[str, Any]:
    return {"type": kind, "object": with_rv(obj, rv)}


def bookmark(rv: str) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
        "resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}}}}


async def eventually(condition: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def restarts(metrics: Metrics, kind: str, reason: str) -> float:
    value = metrics.registry.get_sample_value("quorum_watch_restarts_total", {"kind": kind, "reason": reason})
    return value or 0.0


@pytest.fixture
def cache() -> ClusterCache:
    return ClusterCache(LEVEL_LABELS)


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
async def run(cache: ClusterCache, metrics: Metrics) -> AsyncIterator[Callable[..., Informer]]:
    started: list[Informer] = []

    def start(client: FakeApiserver, **kwargs: Any) -> Informer:
        informer = Informer(client, cache, metrics, **kwargs)  # type: ignore[arg-type]
        informer.start()
        started.append(informer)
        return informer

    yield start
    for informer in started:
        await informer.stop()


N0, N1 = "kwok-b0-r0-n0", "kwok-b0-r0-n1"


async def test_list_then_watch_events_then_relist_on_gone(
    cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer]
) -> None:
    kube = FakeApiserver()
    kube.lists[NODES] = [([with_rv(make_node(N0, "b0", "b0-r0"), "90"),
                           with_rv(make_node(N1, "b0", "b0-r0"), "91")], "100")]
    w0 = make_pod("w0", "u0", group="train-a")
    kube.lists[PODS] = [
        ([with_rv(w0, "95")], "100"),
        # After the relist: w0 still bound, w2 appeared while the watch was broken, w1 is gone.
        ([with_rv(bound(w0, N0), "150"), with_rv(make_pod("w2", "u2"), "180")], "200"),
    ]
    w1 = make_pod("w1", "u1", group="train-a")
    kube.watches[PODS] = [[
        event("ADDED", w1, "101"),
        event("MODIFIED", bound(w0, N0), "102"),
        bookmark("103"),
        event("MODIFIED", bound(w1, N1), "104"),
        Gone(410, "too old resource version: 100 (104)"),
    ]]

    run(kube)
    await eventually(lambda: kube.lists_of(PODS) == 2 and ("/api/v1/pods", "200") in kube.watch_calls)

    assert kube.watch_calls.count((PODS, "100")) == 1
    assert sorted(cache.pods) == ["u0", "u2"]
    assert cache.pods["u0"].node_name == N0
    assert cache.node_pod_count[N0] == 1
    assert cache.node_pod_count[N1] == 0  # w1 vanished with the relist, and its node was freed
    assert [p.name for p in cache.members("ml/train-a")] == ["w0"]
    assert restarts(metrics, "pods", "gone") == 1
    assert restarts(metrics, "nodes", "gone") == 0
    assert kube.lists_of(NODES) == 1  # other kinds are not relisted
    assert all(cache.synced.values())


async def test_each_pod_list_is_announced_to_the_cache_before_it_is_asked_for(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    """Binds counted before a list was asked for, of pods it lacks, are of deleted pods; one counted
    while it was on its way may be of a pod created after it (the ledger tells them apart by this)."""
    kube = FakeApiserver()
    seen: list[int] = []
    asked = kube.list_objects

    async def list_objects(path: str, trim: Any = None) -> tuple[list[dict[str, Any]], str]:
        if path == PODS:
            seen.append(cache.pod_lists_started)
        return await asked(path, trim)

    kube.list_objects = list_objects  # type: ignore[method-assign]
    kube.lists[PODS] = [([], "100"), ([], "200")]
    kube.watches[PODS] = [[Gone(410, "too old resource version: 100 (101)")]]
    listed: list[str] = []
    cache.listeners.append(lambda e: listed.append(e.key) if e.kind == PODS_LISTED else None)
    run(kube)
    await eventually(lambda: len(listed) >= 2)
    assert seen[:2] == [1, 2]
    assert listed[:2] == ["1", "2"]


async def test_events_apply_to_cache_in_order(cache: ClusterCache, run: Callable[..., Informer]) -> None:
    kube = FakeApiserver()
    kube.lists[NODES] = [([with_rv(make_node(N0, "b0", "b0-r0"), "5")], "10")]
    kube.watches[NODES] = [[
        event("ADDED", make_node(N1, "b0", "b0-r0"), "11"),
        event("MODIFIED", make_node(N0, "b0", "b0-r0", gpus=4), "12"),
        event("DELETED", make_node(N1, "b0", "b0-r0"), "13"),
    ]]
    group = make_podgroup("train-a", 2)
    kube.watches[PODGROUPS] = [[
        event("ADDED", group, "20"),
        event("MODIFIED", make_podgroup("train-a", 3), "21"),
        event("ADDED", make_podgroup("train-b", 2), "22"),
        event("DELETED", make_podgroup("train-b", 2), "23"),
    ]]
    pod = make_pod("w0", "u0")
    kube.watches[PODS] = [[
        event("ADDED", pod, "30"),
        event("MODIFIED", bound(pod, N0), "31"),
        event("MODIFIED", bound(pod, N0, phase="Succeeded"), "32"),
        event("DELETED", bound(pod, N0, phase="Succeeded"), "33"),
        event("ADDED", make_pod("w1", "u1", node=N0, phase="Running"), "34"),
    ]]

    run(kube)
    await eventually(lambda: "u1" in cache.pods and "ml/train-b" not in cache.podgroup_specs
                     and N1 not in cache.nodes and cache.podgroup_specs.get("ml/train-a") is not None
                     and cache.podgroup_specs["ml/train-a"].min_count == 3)

    assert sorted(cache.nodes) == [N0]
    assert cache.nodes[N0].allocatable["nvidia.com/gpu"] == 4
    assert sorted(cache.podgroup_specs) == ["ml/train-a"]
    assert sorted(cache.pods) == ["u1"]
    assert cache.node_pod_count[N0] == 1


async def test_watch_resumes_from_bookmark_after_normal_end(run: Callable[..., Informer]) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [([], "100")]
    kube.watches[PODS] = [[bookmark("150"), EndWatch()], [event("ADDED", make_pod("w0", "u0"), "151"),
                                                           EndWatch()]]
    run(kube)
    await eventually(lambda: len([c for c in kube.watch_calls if c[0] == PODS]) >= 3)
    pod_watches = [rv for path, rv in kube.watch_calls if path == PODS]
    assert pod_watches[:3] == ["100", "150", "151"]
    assert kube.lists_of(PODS) == 1  # a normal end resumes, it does not relist


async def test_missing_podgroup_api_counts_as_synced_and_is_retried(
    cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer]
) -> None:
    cache.replace_podgroups([make_podgroup("stale", 2)])  # left over from before the API went away
    cache.synced["podgroups"] = False
    kube = FakeApiserver()
    kube.lists[PODGROUPS] = [
        ApiError(404, "the server could not find the requested resource"),
        ([with_rv(make_podgroup("train-a", 4), "7")], "8"),
    ]
    run(kube, absent_retry=3600)
    await eventually(lambda: cache.synced["podgroups"])
    assert cache.podgroup_specs == {}
    assert cache.counts()["podgroups"] == 0
    assert restarts(metrics, "podgroups", "error") == 0
    assert kube.lists_of(PODGROUPS) == 1  # waits absent_retry before looking again


async def test_podgroup_api_appearing_later_is_picked_up(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    kube = FakeApiserver()
    kube.lists[PODGROUPS] = [
        ApiError(404, "the server could not find the requested resource"),
        ([with_rv(make_podgroup("train-a", 4), "7")], "8"),
    ]
    run(kube, absent_retry=0.01)
    await eventually(lambda: "ml/train-a" in cache.podgroup_specs)
    assert cache.podgroup_specs["ml/train-a"].min_count == 4
    assert kube.lists_of(PODGROUPS) == 2
    assert (PODGROUPS, "8") in kube.watch_calls


async def test_discovery_watches_the_version_the_server_serves(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    """1.36 serves PodGroups as v1alpha2 (1.35: Workloads as v1alpha1); a CRD installed after the
    start (here Volcano's) is found when the informer looks again."""
    kube = FakeApiserver()
    kube.served = {"scheduling.k8s.io/v1alpha2": ["podgroups", "workloads"],
                   "scheduling.k8s.io/v1alpha1": ["workloads"]}
    v1alpha2 = "/apis/scheduling.k8s.io/v1alpha2/podgroups"
    volcano = "/apis/scheduling.volcano.sh/v1beta1/podgroups"
    kube.lists[v1alpha2] = [([with_rv(make_podgroup("train-a", 4), "7")], "8")]
    kube.lists[volcano] = [([{"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                              "metadata": {"name": "vc", "namespace": "ml", "resourceVersion": "3"},
                              "spec": {"minMember": 2}}], "9")]
    informer = run(kube, absent_retry=0.05)
    await eventually(lambda: "ml/train-a" in cache.podgroup_specs and informer.status()["volcano"] == ABSENT)
    spec = cache.gang_spec("ml/train-a")
    assert spec is not None and spec.home is not None
    assert spec.home.api_version == "scheduling.k8s.io/v1alpha2"
    assert kube.lists_of(PODGROUPS) == 0  # v1beta1 is not served: never asked for
    assert informer.served == {"podgroups": "scheduling.k8s.io/v1alpha2",
                               "workloads": "scheduling.k8s.io/v1alpha1"}
    kube.served["scheduling.volcano.sh/v1beta1"] = ["podgroups"]  # the CRD is installed
    await eventually(lambda: cache.gang_spec("ml/vc") is not None)
    assert cache.gang_spec("ml/vc").min_count == 2  # type: ignore[union-attr]
    # Listed objects are in the cache before the watch opens: "watching" follows the list.
    await eventually(lambda: informer.status()["volcano"] == "watching")


async def test_errors_back_off_and_reconnect_from_the_same_version(
    cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer]
) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [([], "100")]
    kube.watches[PODS] = [
        [ApiError(500, "etcdserver: request timed out")],
        [aiohttp.ClientConnectionError("connection reset by peer")],
        [event("ADDED", make_pod("w0", "u0"), "101")],
    ]
    run(kube, backoff_max=0.05)
    await eventually(lambda: "u0" in cache.pods)
    assert restarts(metrics, "pods", "error") == 1
    assert restarts(metrics, "pods", "connection") == 1
    assert [rv for path, rv in kube.watch_calls if path == PODS] == ["100", "100", "100"]
    assert kube.lists_of(PODS) == 1  # only 410 forces a relist


async def test_pods_404_is_an_error_not_an_absent_api(metrics: Metrics, run: Callable[..., Informer]) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [ApiError(404, "not found"), ([], "1")]
    run(kube, backoff_max=0.05)
    await eventually(lambda: restarts(metrics, "pods", "error") == 1)


DRA_KINDS = ("deviceclasses", "resourceslices", "resourceclaimtemplates", "resourceclaims")


async def test_dra_kinds_not_served_count_as_synced_and_empty(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    """A cluster without resource.k8s.io/v1 (before 1.34): Quorum is ready, and counts no devices."""
    kube = FakeApiserver()
    for plural in DRA_KINDS:
        kube.lists[f"/apis/resource.k8s.io/v1/{plural}"] = [ApiError(404, "the server could not find it")]
    informer = run(kube)
    await eventually(informer.healthy)
    assert {kind: informer.status()[kind] for kind in DRA_KINDS} == dict.fromkeys(DRA_KINDS, ABSENT)


async def test_stop_cancels_all_loops(cache: ClusterCache, metrics: Metrics) -> None:
    kube = FakeApiserver()
    informer = Informer(kube, cache, metrics)  # type: ignore[arg-type]
    informer.start()
    await eventually(lambda: all(cache.synced.values()))
    tasks = list(informer._tasks)
    assert len(tasks) == 12  # nodes, pods, the six kinds of gang object and the four DRA kinds
    await informer.stop()
    assert all(task.done() for task in tasks)
    assert informer._tasks == []


# --------------------------------------------------------------------------- hostile objects


def rejected(metrics: Metrics, kind: str, reason: str) -> float:
    labels = {"kind": kind, "reason": reason}
    return metrics.registry.get_sample_value("quorum_objects_rejected_total", labels) or 0.0


def warnings_naming(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and name in r.getMessage()]


async def test_bad_objects_in_a_watch_are_skipped_and_the_watch_goes_on(
    cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer], caplog: pytest.LogCaptureFixture
) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [([], "100")]
    kube.watches[PODS] = [[
        event("ADDED", make_pod("w0", "u0"), "101"),
        event("ADDED", make_pod("neg", "u-neg", namespace="other", cpu="-1"), "102"),
        {"type": "ADDED", "object": "not an object"},
        event("ADDED", make_pod("typo", "u-typo", namespace="other", memory="64GB"), "103"),
        event("ADDED", make_pod("hog", "u-hog", namespace="other", cpu="1e999999"), "104"),
        event("MODIFIED", bound(make_pod("w0", "u0"), N0), "105"),
        event("ADDED", make_pod("w1", "u1"), "106"),
    ]]
    informer = run(kube)
    await eventually(lambda: "u1" in cache.pods)
    assert sorted(cache.pods) == ["u-hog", "u0", "u1"]
    assert cache.pods["u0"].node_name == N0
    assert kube.watch_calls.count((PODS, "100")) == 1  # one watch, never ended by an object
    assert restarts(metrics, "pods", "error") + restarts(metrics, "pods", "unexpected") == 0
    assert rejected(metrics, "pods", "invalid-quantity") == 2
    assert rejected(metrics, "pods", "invalid-object") == 1
    assert rejected(metrics, "pods", "beyond-capacity") == 1
    assert warnings_naming(caplog, "other/neg") and warnings_naming(caplog, "other/typo")
    assert "cpu" in warnings_naming(caplog, "other/hog")[0]
    assert informer.healthy()


async def test_relist_with_a_bad_object_loads_the_others(
    cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer], caplog: pytest.LogCaptureFixture
) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [
        ([make_pod("w0", "u0")], "100"),
        ([make_pod("w0", "u0"), make_pod("neg", "u-neg", namespace="other", cpu="-2"), make_pod("w1", "u1")],
         "200"),
    ]
    kube.watches[PODS] = [[Gone(410, "too old resource version")]]
    informer = run(kube)
    await eventually(lambda: (PODS, "200") in kube.watch_calls)
    assert sorted(cache.pods) == ["u0", "u1"]
    assert rejected(metrics, "pods", "invalid-quantity") == 1
    assert warnings_naming(caplog, "other/neg")
    assert informer.healthy()


async def test_clamped_pod_is_reported_once(
    metrics: Metrics, run: Callable[..., Informer], caplog: pytest.LogCaptureFixture
) -> None:
    hog = make_pod("hog", "u-hog", namespace="other", memory="1e999999")
    kube = FakeApiserver()
    kube.lists[PODS] = [([with_rv(hog, "90")], "100")]
    kube.watches[PODS] = [[event("MODIFIED", copy.deepcopy(hog), "101"), bookmark("102")]]
    run(kube)
    await eventually(lambda: kube.watch_calls.count((PODS, "100")) == 1)
    await asyncio.sleep(0.02)
    assert rejected(metrics, "pods", "beyond-capacity") == 1
    assert len(warnings_naming(caplog, "other/hog")) == 1


# --------------------------------------------------------------------------- readiness


async def test_not_ready_while_a_watch_backs_off(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [([], "100")]
    kube.watches[PODS] = [[ApiError(500, "etcdserver: request timed out")], []]
    informer = run(kube)
    await eventually(lambda: informer.status()["pods"] == BACKOFF)
    assert not informer.healthy()
    assert cache.synced["pods"] is False  # what /readyz names
    assert informer.status()["nodes"] == "watching"
    await eventually(informer.healthy)  # the watch is accepted again after 0.5 s
    assert informer.status() == {"nodes": "watching", "pods": "watching", "podgroups": "watching",
                                 "compositepodgroups": ABSENT,
                                 "workloads": ABSENT, "coscheduling": ABSENT, "volcano": ABSENT,
                                 "jobsets": ABSENT, **dict.fromkeys(DRA_KINDS, "watching")}
    assert [rv for path, rv in kube.watch_calls if path == PODS] == ["100", "100"]


async def test_not_ready_until_listed_and_absent_api_counts_as_running(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    kube = FakeApiserver()
    kube.lists[PODGROUPS] = [ApiError(404, "the server could not find the requested resource")]
    kube.lists[PODS] = [ApiError(503, "starting"), ([], "5")]
    informer = Informer(kube, cache, Metrics())  # type: ignore[arg-type]
    assert not informer.healthy()  # not started
    informer = run(kube, absent_retry=3600)
    await eventually(lambda: informer.status()["pods"] == BACKOFF)
    assert not informer.healthy()
    await eventually(informer.healthy)
    assert informer.status()["podgroups"] == ABSENT


async def test_unexpected_failure_is_logged_and_the_loop_relists(
    cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer], caplog: pytest.LogCaptureFixture
) -> None:
    kube = FakeApiserver()
    kube.lists[PODS] = [([], "100"), ([make_pod("w0", "u0")], "200")]
    kube.watches[PODS] = [[KeyError("a bug")]]
    informer = run(kube)
    await eventually(lambda: "u0" in cache.pods and informer.healthy())
    assert restarts(metrics, "pods", "unexpected") == 1
    assert kube.lists_of(PODS) == 2
    assert any(r.levelno == logging.ERROR and r.exc_info for r in caplog.records)


async def test_a_loop_that_ended_makes_the_kind_not_ready(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    informer = run(FakeApiserver())
    await eventually(informer.healthy)
    informer._tasks[1].cancel()  # the pods loop, gone for whatever reason
    await eventually(lambda: informer.status()["pods"] == STOPPED)
    assert not informer.healthy()
    assert [kind for kind, done in cache.synced.items() if not done] == ["pods"]


async def test_caches_synced_once_all_kinds_are_listed(
    cache: ClusterCache, run: Callable[..., Informer]
) -> None:
    seen: list[CacheEvent] = []
    cache.listeners.append(seen.append)
    kube = FakeApiserver()
    kube.lists[NODES] = [([with_rv(make_node(N0, "b0", "b0-r0"), "5")], "10")]
    kube.lists[PODGROUPS] = [ApiError(404, "not served")]
    informer = run(kube, absent_retry=3600)
    await eventually(informer.healthy)
    await asyncio.sleep(0.02)
    assert [e.kind for e in seen].count(CACHES_SYNCED) == 1
    assert seen[-1].kind == CACHES_SYNCED


async def test_listed_objects_lose_what_no_record_reads_before_the_cache_takes_them(
        cache: ClusterCache, run: Callable[..., Informer]) -> None:
    """A list is held whole until its last page: managedFields and a node's images (often most of
    the object, never read) go as each page arrives. Everything the cache reads stays."""
    node = make_node("n1", "b0", "b0-r0")
    node["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    node["status"]["images"] = [{"names": ["registry.example/train:1"], "sizeBytes": 1}]
    kube = FakeApiserver()
    kube.lists[NODES] = [([node], "10")]
    taken: list[dict[str, Any]] = []
    replace = cache.replace_nodes

    def keep(objs: Any) -> Any:
        objs = list(objs)
        taken.extend(copy.deepcopy(objs))
        return replace(objs)
    cache.replace_nodes = keep  # type: ignore[method-assign]
    run(kube)
    await eventually(lambda: bool(taken))
    assert "managedFields" not in taken[0]["metadata"] and "images" not in taken[0]["status"]
    assert taken[0]["metadata"]["labels"] == node["metadata"]["labels"]
    assert taken[0]["status"]["allocatable"] == node["status"]["allocatable"]
    assert cache.nodes["n1"].domains == ("b0", "b0-r0", "n1")


async def _buffered(count: int, spend: float) -> AsyncIterator[dict[str, Any]]:
    """A watch whose events are all buffered already: reading one suspends nothing."""
    for i in range(count):
        end = time.monotonic() + spend
        while time.monotonic() < end:  # the work of decoding and applying one event
            pass
        yield {"type": "MODIFIED", "object": {"n": i}}


async def test_a_burst_of_buffered_watch_events_gives_way_to_other_work() -> None:
    """Buffered events suspend nothing, so a burst of them used to hold every request and binding
    until the last was applied. Paced, the loop gets a turn every few milliseconds of events."""
    seen: list[int] = []
    others: list[int] = []

    async def other_work() -> None:
        while len(seen) < 40:
            others.append(len(seen))  # how many events were applied when this ran
            await asyncio.sleep(0)

    task = asyncio.create_task(other_work())
    await asyncio.sleep(0)  # it has run once, before any event
    async for event in paced(_buffered(40, 0.001), every=0.005):
        seen.append(event["object"]["n"])
    await task
    assert seen == list(range(40))
    between = [n for n in others if 0 < n < 40]
    assert len(between) >= 4, others  # about every 5 events over 40 ms; without pacing, none



def watch_events(metrics: Metrics, kind: str, event_type: str) -> float:
    value = metrics.registry.get_sample_value("quorum_watch_events_total", {"kind": kind, "type": event_type})
    return value or 0.0


async def test_watch_events_are_counted_by_kind_and_type(
        cache: ClusterCache, metrics: Metrics, run: Callable[..., Informer]) -> None:
    """What following the cluster costs is read per event: each applied event is counted once,
    bookmarks too, and a type the informer does not know as "other"."""
    kube = FakeApiserver()
    kube.lists[PODS] = [([], "100")]
    pod = make_pod("w0", "u0")
    kube.watches[PODS] = [[
        event("ADDED", pod, "101"),
        event("MODIFIED", bound(pod, N0), "102"),
        event("MODIFIED", bound(pod, N0, phase="Succeeded"), "103"),
        bookmark("104"),
        {"type": "SURPRISE", "object": with_rv(make_pod("w1", "u1"), "105")},
        event("DELETED", bound(pod, N0, phase="Succeeded"), "106"),
    ]]
    run(kube)
    await eventually(lambda: watch_events(metrics, "pods", "DELETED") == 1)
    types = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "other")
    counted = {t: watch_events(metrics, "pods", t) for t in types}
    assert counted == {"ADDED": 1, "MODIFIED": 2, "DELETED": 1, "BOOKMARK": 1, "other": 1}
    assert "u1" not in cache.pods  # an unknown type is counted, not applied
