"""bench/holdextender.py: a gang's bind calls are held until its minCount, then bound together."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp.test_utils import TestClient, TestServer

from .bench_modules import bench_module

hold = bench_module("holdextender")


def member(uid: str, group: str, namespace: str = "ns") -> dict[str, object]:
    return {"metadata": {"uid": uid, "namespace": namespace},
            "spec": {"schedulingGroup": {"podGroupName": group}}}


def podgroup_event(kind: str, name: str, min_count: int) -> dict[str, object]:
    return {"type": kind, "object": {"metadata": {"namespace": "ns", "name": name},
                                     "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}}


class Recorder:
    def __init__(self) -> None:
        self.bound: list[str] = []

    async def __call__(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.bound.append(name)


async def test_no_binding_is_sent_before_the_gangs_min_count_then_all_at_once() -> None:
    binds = Recorder()
    holder = hold.Holder(binds, hold_seconds=5)
    holder.on_event(hold.PODGROUPS, podgroup_event("ADDED", "g", 3))
    for uid in "abc":
        holder.saw_pod(member(uid, "g"))
    first = [asyncio.ensure_future(holder.hold("ns", f"p-{uid}", uid, "n1")) for uid in "ab"]
    await asyncio.sleep(0.05)
    assert binds.bound == [] and not any(task.done() for task in first)
    last = await holder.hold("ns", "p-c", "c", "n2")
    assert last == "" and await asyncio.gather(*first) == ["", ""]
    assert sorted(binds.bound) == ["p-a", "p-b", "p-c"] and not holder.held


async def test_a_call_held_too_long_is_answered_with_an_error_and_forgotten() -> None:
    binds = Recorder()
    holder = hold.Holder(binds, hold_seconds=0.05)
    holder.on_event(hold.PODGROUPS, podgroup_event("ADDED", "g", 2))
    holder.saw_pod(member("a", "g"))
    error = await holder.hold("ns", "p-a", "a", "n1")
    assert "incomplete" in error and binds.bound == [] and not holder.held.get(("ns", "g"))


async def test_a_pod_of_no_gang_is_bound_at_once() -> None:
    binds = Recorder()
    holder = hold.Holder(binds, hold_seconds=5)
    assert await holder.hold("ns", "plain", "u", "n1") == "" and binds.bound == ["plain"]


def test_podgroups_are_followed_and_other_events_only_counted() -> None:
    holder = hold.Holder(Recorder(), hold_seconds=5)
    holder.on_event(hold.PODGROUPS, podgroup_event("ADDED", "g", 4))
    holder.on_event(hold.PODGROUPS, podgroup_event("MODIFIED", "g", 8))
    holder.on_event("/api/v1/pods", podgroup_event("ADDED", "p", 2))
    assert holder.min_count == {("ns", "g"): 8}
    holder.on_event(hold.PODGROUPS, podgroup_event("DELETED", "g", 8))
    assert holder.min_count == {} and holder.events == 4


async def test_over_http_filter_passes_one_candidate_and_bind_answers_when_the_gang_is_held() -> None:
    binds = Recorder()
    holder = hold.Holder(binds, hold_seconds=5)
    holder.on_event(hold.PODGROUPS, podgroup_event("ADDED", "g", 2))
    async with TestClient(TestServer(hold.build(holder))) as client:
        for uid in "ab":
            resp = await client.post("/filter", data=orjson.dumps({"Pod": member(uid, "g"),
                                                                   "NodeNames": ["n1", "n2", "n3"]}))
            assert (await resp.json())["nodenames"] == ["n1"]
        resp = await client.post("/prioritize", data=b"{}")
        assert await resp.json() == []
        calls = [client.post("/bind", data=orjson.dumps({"PodName": f"p-{uid}", "PodNamespace": "ns",
                                                          "PodUID": uid, "Node": "n1"})) for uid in "ab"]
        answers = [await resp.json() for resp in await asyncio.gather(*calls)]
    assert answers == [{"Error": ""}, {"Error": ""}] and sorted(binds.bound) == ["p-a", "p-b"]


def test_the_floor_runs_only_when_named_and_before_the_baseline() -> None:
    every = bench_module("cb_workloads").workloads(1000, 4000)
    assert every["W1"].chosen([]) == ("Q", "N")
    assert every["W1"].chosen(["N", "Qz", "Q"]) == ("Q", "Qz", "N")
    assert every["W1"].chosen(["Qz"]) == ("Qz",)
    assert every["W2"].chosen(["Qz"]) == ()
