"""Events as ``KubeClient`` records them: one create, then series counts at most once per interval,
rate limited and bounded in memory; against a recording fake apiserver (``fake_apiserver``)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from extender.adapters.events import EventRecorder, micro_time
from extender.gang.effects import NORMAL, WARNING, ObjectRef

from .fixtures import START, KubeWorld, recorder

POD = ObjectRef("Pod", "v1", "ml", "trainer-0", "uid-0")
EVENTS = "/apis/events.k8s.io/v1/namespaces/ml/events"


async def test_repeats_create_one_event_then_one_series_patch_per_interval(kube: KubeWorld) -> None:
    events = recorder(kube)
    for _ in range(100):
        kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "gang ml/trainer: 3/8")
    await events.flush()
    [created] = kube.api.to("POST", EVENTS)
    assert created.body == {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": created.body["metadata"]["name"], "namespace": "ml"},
        "eventTime": "2026-11-23T18:00:00.000000Z", "reportingController": "quorum.dev/extender",
        "reportingInstance": "test-host", "action": "Scheduling", "reason": "FailedScheduling",
        "note": "gang ml/trainer: 3/8", "type": "Warning",
        "regarding": {"kind": "Pod", "apiVersion": "v1", "namespace": "ml", "name": "trainer-0",
                      "uid": "uid-0"},
    }
    assert created.body["metadata"]["name"].startswith("trainer-0.")
    assert (events.created, events.aggregated, kube.api.to("PATCH", EVENTS)) == (1, 99, [])

    kube.clock.now += 10  # within the interval: still nothing more
    await events.flush()
    assert len(kube.api.requests) == 1

    kube.clock.now += 21
    await events.flush()
    [patch] = kube.api.to("PATCH", EVENTS)
    assert patch.path == f"{EVENTS}/{created.body['metadata']['name']}"
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {"series": {"count": 100, "lastObservedTime": "2026-11-23T18:00:00.000000Z"}}

    kube.clock.now += 20  # nothing new: no write
    await events.flush()
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "gang ml/trainer: 3/8")
    await events.flush()
    assert len(kube.api.to("PATCH", EVENTS)) == 1  # the new count waits for the interval
    kube.clock.now += 10
    await events.flush()
    assert kube.api.to("PATCH", EVENTS)[-1].body["series"] == {
        "count": 101, "lastObservedTime": micro_time(START + 51)}
    assert (events.created, events.patched, len(kube.api.requests)) == (1, 2, 3)


async def test_distinct_reasons_objects_and_notes_make_distinct_events(kube: KubeWorld) -> None:
    events = recorder(kube)
    group = ObjectRef("PodGroup", "scheduling.k8s.io/v1beta1", "ml", "trainer")
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "3/8")
    kube.client.record_event(POD, NORMAL, "Scheduled", "Binding", "bound to n1")
    kube.client.record_event(group, WARNING, "FailedScheduling", "Scheduling", "3/8")
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "4/8")
    await events.flush()
    posts = kube.api.to("POST", EVENTS)
    assert [(p.body["regarding"]["kind"], p.body["reason"], p.body["note"]) for p in posts] == [
        ("Pod", "FailedScheduling", "3/8"), ("Pod", "Scheduled", "bound to n1"),
        ("PodGroup", "FailedScheduling", "3/8"), ("Pod", "FailedScheduling", "4/8")]
    assert "uid" not in posts[2].body["regarding"]
    assert len({p.body["metadata"]["name"] for p in posts}) == 4


async def test_new_events_over_the_rate_limit_are_dropped_and_counted(kube: KubeWorld) -> None:
    events = recorder(kube, rate=1.0, burst=5,
                      on_result=lambda result: kube.metrics.events.labels(result).inc())
    for i in range(8):
        kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", f"try {i}")
    await events.flush()
    assert (len(kube.api.to("POST", EVENTS)), events.created, events.dropped) == (5, 5, 3)
    assert kube.metrics.registry.get_sample_value("quorum_events_total", {"result": "dropped"}) == 3
    kube.clock.now += 2  # two tokens again
    for i in range(3):
        kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", f"later {i}")
    await events.flush()
    assert (events.created, events.dropped) == (7, 4)


async def test_client_counts_events_in_its_metrics(kube: KubeWorld) -> None:
    for _ in range(3):
        kube.client.record_event(POD, NORMAL, "Scheduled", "Binding", "bound")
    await kube.client.events.flush()
    sample = kube.metrics.registry.get_sample_value
    assert sample("quorum_events_total", {"result": "created"}) == 1
    assert sample("quorum_events_total", {"result": "aggregated"}) == 2


async def test_memory_holds_at_most_max_keys_and_forgets_old_events(kube: KubeWorld) -> None:
    events = recorder(kube, max_keys=3, ttl=600.0)
    for i in range(5):
        kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", f"note {i}")
        await events.flush()
    assert (events.remembered, len(kube.api.requests)) == (3, 5)
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "note 4")  # remembered
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "note 0")  # forgotten
    await events.flush()
    assert (events.aggregated, len(kube.api.requests)) == (1, 6)
    kube.clock.now += 601
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "note 4")
    assert events.remembered == 1  # the others expired
    await events.flush()
    assert len(kube.api.to("POST", EVENTS)) == 7  # seen again after expiry: a new Event


async def test_new_events_beyond_the_queue_bound_are_dropped(kube: KubeWorld) -> None:
    events = recorder(kube, max_keys=3)
    for i in range(5):  # no await between: nothing is sent yet
        kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", f"note {i}")
    await events.flush()
    assert (events.created, events.dropped) == (3, 2)


async def test_event_write_failures_are_counted_never_raised(kube: KubeWorld,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    events = recorder(kube)
    kube.api.answers[("POST", EVENTS)] = (403, "events.events.k8s.io is forbidden")
    with caplog.at_level(logging.DEBUG, logger="extender.adapters.events"):
        kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "3/8")
        await events.flush()
    assert (events.created, events.failed) == (0, 1)
    assert any(r.getMessage() == "event write refused" for r in caplog.records)
    del kube.api.answers[("POST", EVENTS)]
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "3/8")
    await events.flush()
    assert events.created == 1  # a failed Event is not aggregated into: the next one is created


async def test_a_series_patch_of_an_expired_event_starts_a_new_event(kube: KubeWorld) -> None:
    events = recorder(kube)
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "3/8")
    await events.flush()
    name = kube.api.requests[0].body["metadata"]["name"]
    kube.api.answers[("PATCH", f"{EVENTS}/{name}")] = (404, "not found")
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "3/8")
    kube.clock.now += 30
    await events.flush()
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "3/8")
    await events.flush()
    assert [r.method for r in kube.api.requests] == ["POST", "PATCH", "POST"]


async def test_a_long_note_is_cut_to_1024_bytes(kube: KubeWorld) -> None:
    events = recorder(kube)
    kube.client.record_event(POD, WARNING, "FailedScheduling", "Scheduling", "needs 8 × 4 GPUs " * 100)
    await events.flush()
    note = kube.api.requests[0].body["note"]
    assert 1020 < len(note.encode()) <= 1024 and note.startswith("needs 8 × 4 GPUs")


def test_without_a_running_loop_events_are_only_queued() -> None:
    sent: list[tuple[str, str]] = []

    async def send(method: str, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        sent.append((method, path))
        return 201, b"{}"

    events = EventRecorder(send, instance="test-host")
    events.record(POD, NORMAL, "Scheduled", "Binding", "bound")
    assert sent == [] and events.created == 0
    asyncio.run(events.flush())
    assert sent == [("POST", EVENTS)] and events.created == 1


async def test_the_flusher_writes_on_its_own(kube: KubeWorld) -> None:
    kube.client.record_event(POD, NORMAL, "Scheduled", "Binding", "bound")
    for _ in range(200):  # a hang detector only: it takes milliseconds
        if kube.api.requests:
            break
        await asyncio.sleep(0.01)
    assert len(kube.api.to("POST", EVENTS)) == 1


async def test_close_stops_the_flusher_and_sends_what_is_queued(kube: KubeWorld) -> None:
    kube.client.record_event(POD, NORMAL, "Scheduled", "Binding", "bound")
    task = kube.client.events._task
    assert task is not None and not task.done()
    await kube.client.close()
    assert task.done()
    assert len(kube.api.to("POST", EVENTS)) == 1




async def test_a_create_that_did_not_reach_the_apiserver_is_tried_again() -> None:
    """A kept-alive connection the apiserver had just closed loses the request: one Evicted Event of
    four went missing that way. The Event has its own name, so it is sent again, never twice."""
    sent: list[str] = []
    outcomes = [ConnectionResetError("Connection reset by peer"), (201, b"{}")]

    async def send(method: str, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        sent.append(method)
        outcome = outcomes.pop(0) if outcomes else (201, b"{}")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    events = EventRecorder(send, instance="test-host")
    events.record(POD, WARNING, "Evicted", "Evicted", "readiness timeout")
    await events.flush()
    assert sent == ["POST", "POST"] and (events.created, events.failed) == (1, 0)


async def test_a_create_that_never_gets_through_is_given_up_after_a_few_tries() -> None:
    sent: list[str] = []

    async def send(method: str, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        sent.append(method)
        raise ConnectionResetError("Connection reset by peer")

    events = EventRecorder(send, instance="test-host")
    events.record(POD, WARNING, "Evicted", "Evicted", "readiness timeout")
    await events.flush()
    assert len(sent) == 3 and (events.created, events.failed) == (0, 1)
