"""Evictions and PodGroup writes as ``KubeClient`` sends them, against a recording fake apiserver
(``fake_apiserver``): the gang core's side effects other than Events (``test_kube_events``)."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from extender.adapters.bindings import BIND_ATTEMPTS, RETRY_AFTER_MAX_SECONDS, retry_after_seconds
from extender.adapters.kube import Credentials, KubeClient
from extender.cluster.gang_sources import ANNOTATION_REQUEUE
from extender.cluster.records import GangHome, PodRecord
from extender.gang.core import BindFailed, EvictionFailed
from extender.gang.effects import GangCondition

from .fake_apiserver import Request
from .fixtures import KubeWorld

PODGROUP = "/apis/scheduling.k8s.io/v1beta1/namespaces/ml/podgroups/trainer"
TRAINER = GangHome("scheduling.k8s.io/v1beta1", "PodGroup", "podgroups", "ml", "trainer", conditions=True)
EVICTION = "/api/v1/namespaces/ml/pods/trainer-0/eviction"


# --------------------------------------------------------------------------- evictions


async def test_eviction_posts_a_policy_v1_eviction_guarded_by_the_pod_uid(kube: KubeWorld) -> None:
    await kube.client.evict_pod("ml", "trainer-0", "uid-0", "gang ml/trainer is requeued")
    [request] = kube.api.requests
    assert (request.method, request.path, request.content_type) == ("POST", EVICTION, "application/json")
    assert request.body == {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": "trainer-0", "namespace": "ml"},
                            "deleteOptions": {"preconditions": {"uid": "uid-0"}}}


async def test_forced_eviction_sets_a_zero_grace_period(kube: KubeWorld) -> None:
    await kube.client.evict_pod("ml", "trainer-0", "uid-0", "node gone", grace_seconds=0)
    assert kube.api.requests[0].body["deleteOptions"] == {"preconditions": {"uid": "uid-0"},
                                                             "gracePeriodSeconds": 0}


@pytest.mark.parametrize("status, message", [
    (200, ""),
    (404, 'pods "trainer-0" not found'),
    (409, 'Operation cannot be fulfilled on pods "trainer-0": Precondition failed: UID in precondition: '
          'uid-0, UID in object meta: uid-1'),
])
async def test_eviction_of_a_pod_that_is_gone_or_replaced_succeeds(kube: KubeWorld, status: int,
                                                                   message: str) -> None:
    kube.api.answers[("POST", EVICTION)] = (status, message)
    await kube.client.evict_pod("ml", "trainer-0", "uid-0", "requeue")
    assert len(kube.api.requests) == 1


@pytest.mark.parametrize("status, message, expected", [
    (429, "Cannot evict pod as it would violate the pod's disruption budget.", "PodDisruptionBudget"),
    (409, 'Operation cannot be fulfilled on poddisruptionbudgets "pdb": the object has been modified',
     "the object has been modified"),
    (500, "etcdserver: request timed out", "etcdserver: request timed out"),
])
async def test_eviction_refused_raises_eviction_failed(kube: KubeWorld, status: int, message: str,
                                                       expected: str) -> None:
    kube.api.answers[("POST", EVICTION)] = (status, message)
    with pytest.raises(EvictionFailed, match=expected):
        await kube.client.evict_pod("ml", "trainer-0", "uid-0", "requeue")


async def test_a_dry_run_eviction_asks_with_dry_run_all_and_evicts_nothing(kube: KubeWorld) -> None:
    await kube.client.evict_pod("ml", "trainer-0", "uid-0", "requeue", dry_run=True)
    [request] = kube.api.requests
    assert request.body["deleteOptions"] == {"preconditions": {"uid": "uid-0"}, "dryRun": ["All"]}


async def test_a_refused_eviction_names_the_budget_the_apiserver_names(kube: KubeWorld) -> None:
    kube.api.answers[("POST", EVICTION)] = (429, "Cannot evict pod as it would violate the pod's "
                                                 "disruption budget.")
    kube.api.details[("POST", EVICTION)] = {"causes": [
        {"reason": "DisruptionBudget",
         "message": "The disruption budget keep-trainer needs 2 healthy pods and has 2 currently"}]}
    with pytest.raises(EvictionFailed, match="disruption budget keep-trainer needs 2"):
        await kube.client.evict_pod("ml", "trainer-0", "uid-0", "requeue", dry_run=True)


@pytest.mark.parametrize("details", [None, {"causes": "not a list"}, {"causes": [7, {}]}])
async def test_a_refusal_without_usable_causes_still_says_why(kube: KubeWorld, details: object) -> None:
    kube.api.answers[("POST", EVICTION)] = (429, "Cannot evict pod as it would violate the pod's "
                                                 "disruption budget.")
    if details is not None:
        kube.api.details[("POST", EVICTION)] = details  # type: ignore[assignment]
    with pytest.raises(EvictionFailed, match=r"disruption budget\.$"):
        await kube.client.evict_pod("ml", "trainer-0", "uid-0", "requeue", dry_run=True)


async def test_eviction_without_an_apiserver_raises_eviction_failed() -> None:
    client = KubeClient(Credentials("http://127.0.0.1:1", False, {}))
    try:
        with pytest.raises(EvictionFailed, match="trainer-0"):
            await client.evict_pod("ml", "trainer-0", "uid-0", "requeue")
    finally:
        await client.close()


# --------------------------------------------------------------------------- bindings

BINDING = "/api/v1/namespaces/ml/pods/trainer-0/binding"


async def test_binding_posts_a_binding_to_the_node_guarded_by_the_pod_uid(kube: KubeWorld) -> None:
    await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    [request] = kube.api.requests
    assert (request.method, request.path) == ("POST", BINDING)
    assert request.body == {"apiVersion": "v1", "kind": "Binding",
                            "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "uid-0"},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}}


@pytest.mark.parametrize("message", ['pods "trainer-0" not found', ""])
async def test_binding_a_pod_that_does_not_exist_says_the_pod_was_not_found(kube: KubeWorld,
                                                                           message: str) -> None:
    kube.api.answers[("POST", BINDING)] = (404, message)
    with pytest.raises(BindFailed) as failure:
        await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    expected = "binding ml/trainer-0 to node-a failed: pod ml/trainer-0 not found (HTTP 404)"
    assert str(failure.value) == expected


TOO_MANY = (429, "Too many requests, please try again later.")


async def test_a_binding_turned_away_is_sent_again_until_it_is_made(kube: KubeWorld) -> None:
    """API Priority and Fairness turns a request away (429) when it finds no seat in time; the
    binding was not made, and failing it would leave the gang bound but for this member."""
    kube.api.scripts[("POST", BINDING)] = [TOO_MANY, TOO_MANY]
    await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    sent = kube.api.to("POST", BINDING)
    assert len(sent) == 3
    assert all(r.body["target"]["name"] == "node-a" for r in sent)


async def test_a_binding_turned_away_waits_as_long_as_the_apiserver_asks(kube: KubeWorld) -> None:
    kube.api.scripts[("POST", BINDING)] = [TOO_MANY]
    kube.api.retry_after = "1"
    started = asyncio.get_running_loop().time()
    await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    assert asyncio.get_running_loop().time() - started >= 0.9
    assert len(kube.api.to("POST", BINDING)) == 2


async def test_a_binding_turned_away_every_time_fails_saying_so(kube: KubeWorld) -> None:
    kube.api.answers[("POST", BINDING)] = TOO_MANY
    with pytest.raises(BindFailed) as failure:
        await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    assert str(failure.value) == ("binding ml/trainer-0 to node-a failed: HTTP 429: Too many requests, "
                                  f"please try again later. (turned away {BIND_ATTEMPTS} times)")
    assert len(kube.api.to("POST", BINDING)) == BIND_ATTEMPTS


@pytest.mark.parametrize("status", [409, 500, 422])
async def test_a_binding_refused_otherwise_is_sent_once(kube: KubeWorld, status: int) -> None:
    kube.api.scripts[("POST", BINDING)] = [(status, "no")]
    with pytest.raises(BindFailed, match=f"HTTP {status}: no"):
        await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    assert len(kube.api.to("POST", BINDING)) == 1


@pytest.mark.parametrize("header, seconds", [
    ("0", 0.0), ("1", 1.0), ("2.5", 2.5), (str(RETRY_AFTER_MAX_SECONDS * 10), RETRY_AFTER_MAX_SECONDS),
    ("-3", 0.0), (None, 1.0), ("soon", 1.0), ("nan", 1.0)])
def test_the_wait_a_retry_after_asks_for_is_bounded(header: str | None, seconds: float) -> None:
    assert retry_after_seconds(header) == seconds


class _TimesOut:
    """A request whose answer never came in time, as aiohttp reports it: a TimeoutError saying nothing."""

    async def __aenter__(self) -> None:
        raise TimeoutError

    async def __aexit__(self, *exc_info: object) -> None:
        return None


async def test_a_binding_that_fails_without_a_message_names_the_error(
        kube: KubeWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiohttp.ClientSession, "post", lambda *args, **kwargs: _TimesOut())
    with pytest.raises(BindFailed) as failure:
        await kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a")
    assert str(failure.value) == "binding ml/trainer-0 to node-a failed: TimeoutError"


async def test_a_binding_is_sent_while_every_other_connection_is_taken(kube: KubeWorld) -> None:
    """Bindings have connections of their own: 200 long requests fill the pool of everything else
    (aiohttp's limit), and a binding sent meanwhile is still answered at once."""
    held = 200
    kube.api.slow = [60.0] * held
    url = kube.client.credentials.host + "/api/v1/namespaces/ml/pods"

    async def long_request() -> None:
        async with kube.client.session.get(url) as resp:
            await resp.read()

    others = [asyncio.create_task(long_request()) for _ in range(held)]
    try:
        for _ in range(500):
            if kube.api.in_flight == held:
                break
            await asyncio.sleep(0.01)
        assert kube.api.in_flight == held
        await asyncio.wait_for(kube.client.bind_pod("ml", "trainer-0", "uid-0", "node-a"), 20)
        assert kube.api.to("POST", BINDING)
    finally:
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


async def test_background_writes_are_capped_in_flight(kube: KubeWorld) -> None:
    """A burst of writes (Events, PodGroup status, annotations) goes out at most 16 at a time: each
    in-flight write is a connection, and a burst of gangs once opened nearly 200 at once."""
    kube.api.slow = [0.05] * 60
    written = await asyncio.gather(*(kube.client.annotate_pod("ml", f"p{i}", {"a": "b"}) for i in range(60)))
    assert all(written) and len(kube.api.to("PATCH", "/api/v1/namespaces/ml/pods/")) == 60
    assert kube.api.most_in_flight == 16


# --------------------------------------------------------------------------- PodGroup conditions


def conditions_sent(request: Request) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"])
            for c in request.body["status"]["conditions"]}


async def test_conditions_are_applied_with_stable_transition_times(kube: KubeWorld) -> None:
    scheduled = GangCondition("PodGroupInitiallyScheduled", True, "Scheduled", "8/8 bound")
    ready = GangCondition("quorum.dev/PodsReady", False, "Waiting", "0/8 ready")
    await kube.client.set_gang_conditions(TRAINER, [scheduled, ready])
    [first] = kube.api.requests
    assert (first.method, first.path, first.content_type) == (
        "PATCH", f"{PODGROUP}/status", "application/apply-patch+yaml")
    assert first.query == {"fieldManager": "quorum", "force": "true"}
    assert first.body == {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "status": {"conditions": [
            {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled",
             "message": "8/8 bound", "lastTransitionTime": "2026-11-23T18:00:00Z"},
            {"type": "quorum.dev/PodsReady", "status": "False", "reason": "Waiting",
             "message": "0/8 ready", "lastTransitionTime": "2026-11-23T18:00:00Z"}]},
    }
    kube.clock.now += 90
    await kube.client.set_gang_conditions(TRAINER, [
        GangCondition(scheduled.type, True, "Scheduled", "8/8 bound, 1 replaced"),
        GangCondition(ready.type, True, "AllReady", "8/8 ready")])
    assert conditions_sent(kube.api.requests[1]) == {
        scheduled.type: ("True", "Scheduled", "2026-11-23T18:00:00Z"),  # status unchanged: time kept
        ready.type: ("True", "AllReady", "2026-11-23T18:01:30Z"),
    }


async def test_a_composite_gets_its_kinds_condition_names_and_is_not_confused_with_a_podgroup(
        kube: KubeWorld) -> None:
    composite = GangHome("scheduling.k8s.io/v1alpha3", "CompositePodGroup", "compositepodgroups", "ml",
                         "trainer", conditions=True)
    scheduled = GangCondition("PodGroupInitiallyScheduled", True, "Scheduled", "3/3 bound")
    started = GangCondition("quorum.dev/GangStarted", False, "NotStarted", "")
    await kube.client.set_gang_conditions(composite, [scheduled, started])
    await kube.client.set_gang_conditions(TRAINER, [scheduled])
    first, second = kube.api.requests
    assert first.path == "/apis/scheduling.k8s.io/v1alpha3/namespaces/ml/compositepodgroups/trainer/status"
    assert [c["type"] for c in first.body["status"]["conditions"]] == \
        ["CompositePodGroupInitiallyScheduled", "quorum.dev/GangStarted"]
    assert first.body["kind"] == "CompositePodGroup"
    # The PodGroup of the same name starts its own condition history (its transition time is new).
    assert [c["type"] for c in second.body["status"]["conditions"]] == ["PodGroupInitiallyScheduled"]
    assert second.path == f"{PODGROUP}/status"


async def test_condition_writes_of_a_gang_land_in_the_order_they_were_asked(kube: KubeWorld) -> None:
    """Each write sends the whole set: an older one answered after a newer one would take back
    what the newer one added (a condition set a moment later, lost)."""
    kube.api.slow = [0.2, 0.0]
    started = GangCondition("quorum.dev/GangStarted", True, "AllMembersStarted", "")
    older = asyncio.ensure_future(kube.client.set_gang_conditions(TRAINER, []))
    newer = asyncio.ensure_future(kube.client.set_gang_conditions(TRAINER, [started]))
    await asyncio.gather(older, newer)
    assert kube.api.most_in_flight == 1
    assert [list(conditions_sent(r)) for r in kube.api.requests] == [[], ["quorum.dev/GangStarted"]]


async def test_sets_asked_for_while_a_write_is_in_flight_fold_into_the_newest(kube: KubeWorld) -> None:
    """Members bound one by one change the live count as many times: while the gang's write is
    in flight, only the newest set waits to be sent."""
    kube.api.slow = [0.2]
    counts = [GangCondition("PodGroupSatisfied", True, "MinCountSatisfied", f"{n} of 4 members scheduled")
              for n in range(1, 5)]
    first = asyncio.ensure_future(kube.client.set_gang_conditions(TRAINER, counts[:1]))
    await asyncio.sleep(0.05)  # the first write is at the apiserver
    later = [asyncio.ensure_future(kube.client.set_gang_conditions(TRAINER, [c])) for c in counts[1:]]
    await asyncio.gather(first, *later)
    assert [r.body["status"]["conditions"][0]["message"] for r in kube.api.requests] == [
        "1 of 4 members scheduled", "4 of 4 members scheduled"]


async def test_sets_asked_for_within_the_settling_time_go_as_one_write(kube: KubeWorld) -> None:
    """A gang found waiting, bound a moment later, its pods Ready a moment after: one write."""
    kube.client.gang_writes.settle_seconds = 0.1
    steps = [GangCondition("PodGroupInitiallyScheduled", status, reason, "")
             for status, reason in ((False, "Unschedulable"), (True, "Scheduled"))]
    first = asyncio.ensure_future(kube.client.set_gang_conditions(TRAINER, steps[:1]))
    await asyncio.sleep(0.02)
    assert kube.api.requests == []  # still settling
    await asyncio.gather(first, kube.client.set_gang_conditions(TRAINER, steps[1:]))
    [request] = kube.api.requests
    assert conditions_sent(request)["PodGroupInitiallyScheduled"][:2] == ("True", "Scheduled")
    await kube.client.set_gang_conditions(TRAINER, steps[:1])  # later: a write of its own
    assert len(kube.api.requests) == 2


async def test_a_write_cancelled_while_waiting_does_not_hold_back_later_sets(kube: KubeWorld) -> None:
    kube.api.slow = [0.2]
    first = asyncio.ensure_future(kube.client.set_gang_conditions(TRAINER, []))
    await asyncio.sleep(0.05)
    waiting = asyncio.ensure_future(
        kube.client.set_gang_conditions(TRAINER, [GangCondition("A", True, "A", "")]))
    await asyncio.sleep(0)
    waiting.cancel()
    await first
    await kube.client.set_gang_conditions(TRAINER, [GangCondition("B", True, "B", "")])
    assert [list(conditions_sent(r)) for r in kube.api.requests] == [[], ["B"]]


async def test_conditions_of_a_deleted_podgroup_are_ignored(kube: KubeWorld,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    kube.api.answers[("PATCH", f"{PODGROUP}/status")] = (404, "podgroups not found")
    condition = GangCondition("quorum.dev/PodsReady", True, "AllReady", "")
    with caplog.at_level(logging.WARNING):
        await kube.client.set_gang_conditions(TRAINER, [condition])
    assert not caplog.records
    kube.clock.now += 5  # a PodGroup of the same name later starts afresh
    del kube.api.answers[("PATCH", f"{PODGROUP}/status")]
    await kube.client.set_gang_conditions(TRAINER, [condition])
    assert conditions_sent(kube.api.requests[1])[condition.type][2] == "2026-11-23T18:00:05Z"


async def test_condition_errors_are_logged_not_raised(kube: KubeWorld,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    kube.api.answers[("PATCH", f"{PODGROUP}/status")] = (422, "reason: Invalid value")
    with caplog.at_level(logging.WARNING):
        await kube.client.set_gang_conditions(TRAINER, [GangCondition("X", True, "Y", "")])
    assert [r.getMessage() for r in caplog.records] == ["writing PodGroup conditions failed"]


# --------------------------------------------------------------------------- PodGroup annotations


async def test_annotations_are_merge_patched_with_null_deleting(kube: KubeWorld) -> None:
    written = await kube.client.annotate_gang(TRAINER, {"quorum.dev/requeue-count": "2",
                                                                   "quorum.dev/deactivated": None})
    [request] = kube.api.requests
    assert written is True
    assert (request.method, request.path, request.content_type) == (
        "PATCH", PODGROUP, "application/merge-patch+json")
    assert request.body == {"metadata": {"annotations": {"quorum.dev/requeue-count": "2",
                                                         "quorum.dev/deactivated": None}}}


@pytest.mark.parametrize("status, logged", [(404, False), (403, True), (500, True)])
async def test_annotations_not_written_return_false(kube: KubeWorld, caplog: pytest.LogCaptureFixture,
                                                    status: int, logged: bool) -> None:
    kube.api.answers[("PATCH", PODGROUP)] = (status, "no")
    with caplog.at_level(logging.WARNING):
        written = await kube.client.annotate_gang(TRAINER, {"quorum.dev/requeue-count": "1"})
    assert written is False
    assert bool(caplog.records) is logged


# --------------------------------------------------------------------------- lists


async def test_a_paged_list_trims_each_page_as_it_arrives() -> None:
    """The items of a list are held until its last page: the trim must not wait for it."""
    trimmed_before_last_page: list[int] = []
    trimmed: list[str] = []

    async def pages(request: web.Request) -> web.Response:
        if request.query.get("continue") == "next":
            trimmed_before_last_page.append(len(trimmed))
            return web.json_response({"metadata": {"resourceVersion": "7"},
                                      "items": [{"metadata": {"name": "b"}}]})
        assert request.query["limit"] == "500"
        return web.json_response({"metadata": {"continue": "next"}, "items": [{"metadata": {"name": "a"}}]})
    app = web.Application()
    app.router.add_get("/api/v1/nodes", pages)
    server = TestServer(app)
    await server.start_server()
    client = KubeClient(Credentials(str(server.make_url("")).rstrip("/"), False, {}))
    try:
        items, version = await client.list_objects(
            "/api/v1/nodes", trim=lambda obj: trimmed.append(obj["metadata"].pop("name")))
    finally:
        await client.close()
        await server.close()
    assert (items, version) == ([{"metadata": {}}, {"metadata": {}}], "7")
    assert trimmed == ["a", "b"] and trimmed_before_last_page == [1]


# --------------------------------------------------------------------------- nudges


async def test_a_nudge_patches_an_annotation_only_on_pods_still_wanted_when_sent(kube: KubeWorld) -> None:
    waiting, bound = (PodRecord(f"uid-{n}", "ml", n, "", {}, False, False, "ml/w")
                      for n in ("w0", "w1"))
    await kube.client.requeue_pods([waiting, bound], "gang ml/w: reserved", lambda p: p is waiting)
    [request] = kube.api.requests
    assert (request.method, request.path, request.content_type) == (
        "PATCH", "/api/v1/namespaces/ml/pods/w0", "application/merge-patch+json")
    assert list(request.body["metadata"]["annotations"]) == [ANNOTATION_REQUEUE]
    sample = kube.metrics.registry.get_sample_value
    assert sample("quorum_nudges_total", {"result": "sent"}) == 1
    assert sample("quorum_nudges_total", {"result": "skipped"}) == 1
