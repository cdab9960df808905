"""A running gang whose Job or namespace is deleted is going, not recovering: the garbage collector
deletes its pods one by one, and each loss would otherwise make a Warning ``Recovering`` Event and a
condition write on a PodGroup about to be deleted too (``gang/reporting.py``). A member deleted
while its mates stay is still reported, once the grace is over or the gang moves on."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from extender.gang import reporting
from extender.gang.effects import CONDITION_RECOVERING

from .fixtures import World, gang_pod, make_podgroup, schedule
from .test_lifecycle import LifecycleWorld, deliver, group_gang, lifecycle_world, ready

GRACE = 0.05


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reporting, "RECOVERING_GRACE_SECONDS", GRACE)


def deleting(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the watch shows it once a delete was accepted (graceful: it is still there)."""
    out = copy.deepcopy(obj)
    out["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    return out


async def running_gang(world: LifecycleWorld, size: int = 3, now_ready: bool = True) -> list[str]:
    names = group_gang(world, "g", size)
    await schedule(world, names)
    if now_ready:
        for name in names:
            deliver(world, ready(world.pods[name]))
    await asyncio.sleep(0)
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady"][:1 + now_ready]
    world.applied.clear()
    return names


async def delete_one_by_one(world: World, names: list[str]) -> None:
    for name in names:
        deliver(world, deleting(world.pods[name]))
        await asyncio.sleep(0)


def remove(world: World, names: list[str]) -> None:
    for name in names:
        world.cache.delete_pod(world.pods.pop(name))


async def test_a_deleted_job_gives_its_running_gang_no_recovering_event_and_writes_nothing() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    names = await running_gang(world)
    await delete_one_by_one(world, names)
    world.cache.delete_podgroup(make_podgroup("g", 3))
    remove(world, names)
    await asyncio.sleep(GRACE * 3)
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady"]
    assert [e for e in world.actions.events if e[1] == "Warning"] == []
    assert world.applied == {}


async def test_a_namespace_whose_pods_go_before_the_podgroup_writes_nothing_to_it() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    names = await running_gang(world)
    await delete_one_by_one(world, names)
    await asyncio.sleep(GRACE * 3)  # the grace is over with every member on its way out
    remove(world, names)
    await asyncio.sleep(0)
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady"]
    assert world.applied == {}


async def test_a_member_deleted_while_its_mates_stay_is_reported_after_the_grace() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    names = await running_gang(world)
    await delete_one_by_one(world, names[:1])
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady"]
    await asyncio.sleep(GRACE * 3)
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady", "Recovering"]
    assert (CONDITION_RECOVERING, True) in set(world.applied["ml/g"])


async def test_a_deleted_member_replaced_within_the_grace_says_recovering_then_recovered() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    names = await running_gang(world, now_ready=False)  # not Ready yet: whole again once bound
    await delete_one_by_one(world, names[:1])
    remove(world, names[:1])
    replacement = group_gang(world, "g", 1, start=3)
    await schedule(world, replacement)
    assert world.coordinator.phase_of("ml/g") == "Bound"
    # Written when the gang moved on, before what followed it.
    assert world.actions.event_reasons("g") == ["Bound", "Recovering", "Recovered"]
    await asyncio.sleep(GRACE * 3)  # the grace's end writes nothing more
    assert world.actions.event_reasons("g") == ["Bound", "Recovering", "Recovered"]


async def test_a_failed_member_is_still_reported_at_once() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    names = await running_gang(world)
    deliver(world, ready(world.pods[names[0]], phase="Failed", is_ready=False))
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady", "Recovering"]


async def test_an_annotation_gang_reports_on_a_member_that_stays_not_one_on_its_way_out() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    for i in range(3):
        world.add(gang_pod(f"a{i}", gang="a", min_count=3, gpus=8))
    await schedule(world, ["a0", "a1", "a2"])
    assert world.actions.event_reasons("a0") == ["Bound"]
    await delete_one_by_one(world, ["a0"])
    await asyncio.sleep(GRACE * 3)
    assert world.actions.event_reasons("a0") == ["Bound"]
    assert world.actions.event_reasons("a1") == ["Recovering"]
