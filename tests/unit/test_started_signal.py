"""The gang-started signal: an Event and a condition once minCount members started, and for gangs
that opt in, the ConfigMap their init containers wait for; a requeued gang starts over."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from extender.gang.effects import CONDITION_STARTED

from .fixtures import World, make_podgroup, schedule
from .test_lifecycle import LifecycleWorld, group_gang

CONFIGMAP = "quorum.dev/started-configmap"


def started(world: World, name: str) -> None:
    """The kubelet took the pod (``status.startTime``), as the watch reports it."""
    obj = copy.deepcopy(world.pods[name])
    obj["status"]["startTime"] = "2026-11-25T10:00:00Z"
    world.pods[name] = obj
    world.cache.upsert_pod(obj)


async def run_and_start(world: World, names: list[str]) -> None:
    """kube-scheduler binds the gang; then every member's kubelet takes it."""
    await schedule(world, names)
    for name in names:
        started(world, name)
    await asyncio.sleep(0)


def opted_in(world: World, name: str, count: int, configmap: str = "train-started") -> list[str]:
    group = make_podgroup(name, count)
    group["metadata"]["annotations"] = {CONFIGMAP: configmap}
    group["metadata"]["uid"] = f"uid-pg-{name}"
    world.cache.upsert_podgroup(group)
    return group_gang(world, name, count)


async def test_the_configmap_is_written_only_once_every_member_started() -> None:
    world = LifecycleWorld(started_config_maps=True)
    names = opted_in(world, "train", 4)
    await schedule(world, names)
    for name in names[:3]:
        started(world, name)
    await asyncio.sleep(0)
    assert world.actions.configmaps == {}
    assert "GangStarted" not in world.actions.event_reasons("train")
    started(world, names[3])
    await asyncio.sleep(0)
    written = world.actions.configmaps["ml/train-started"]
    assert written["data"]["gang"] == "ml/train" and written["data"]["members"] == "4"
    assert written["owner"].name == "train" and written["owner"].uid == "uid-pg-train"
    assert world.actions.event_reasons("train").count("GangStarted") == 1
    assert (CONDITION_STARTED, True) in world.applied["ml/train"]


async def test_without_the_setting_the_start_is_told_but_no_configmap_is_written() -> None:
    world = LifecycleWorld()
    await run_and_start(world, opted_in(world, "train", 2))
    assert world.actions.configmaps == {}
    reasons = world.actions.event_reasons("train")
    assert "GangStarted" in reasons and "StartedConfigMapOff" in reasons


async def test_a_gang_without_the_annotation_gets_the_event_and_condition_only() -> None:
    world = LifecycleWorld(started_config_maps=True)
    await run_and_start(world, group_gang(world, "plain", 2))
    assert world.actions.configmaps == {}
    assert "GangStarted" in world.actions.event_reasons("plain")


async def test_a_requeued_gang_closes_its_barrier_again() -> None:
    world = LifecycleWorld(started_config_maps=True)
    await run_and_start(world, opted_in(world, "train", 2))
    assert "ml/train-started" in world.actions.configmaps
    state: Any = world.coordinator.registry.gangs["ml/train"]
    world.coordinator.lifecycle.requeue(state, "gang ml/train: a test requeues it", "test")
    for _ in range(10):  # the members' evictions are asked first
        await asyncio.sleep(0)
    assert world.actions.deleted_configmaps == ["ml/train-started"]
    assert (CONDITION_STARTED, False) in world.applied["ml/train"]


def test_only_a_valid_configmap_name_is_taken() -> None:
    from extender.cluster.gang_sources import lifecycle_overrides
    assert lifecycle_overrides({CONFIGMAP: "train-started"})["started_configmap"] == "train-started"
    for bad in ("Train", "-x", "a/b", "x" * 254, "", 7):
        assert "started_configmap" not in lifecycle_overrides({CONFIGMAP: bad}), bad
