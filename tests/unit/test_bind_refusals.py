"""/bind never binds for anyone: a request without a pod UID, or a pod of another scheduler profile,
is refused (``Binder._not_ours``); kube-scheduler's own binds of Quorum's pods go through."""

from __future__ import annotations

from dataclasses import replace

from extender.config import Config
from extender.gang.coordinator import Coordinator

from .fixtures import World, gang_pod


def world_serving(*names: str) -> World:
    world = World()
    config = replace(Config(), scheduler_names=names)
    world.coordinator = Coordinator(config, world.cache, world.actions, world.metrics, strict=True)
    return world


async def test_a_pod_of_another_profile_is_not_bound() -> None:
    world = world_serving("quorum")
    obj = gang_pod("stray")
    obj["spec"]["schedulerName"] = "default-scheduler"
    world.add(obj)
    answer = await world.bind("stray", "b0-r0-n0")
    assert "schedulerName is 'default-scheduler'" in answer and "quorum" in answer
    assert world.actions.binds == []
    assert world.sample("quorum_binds_total", outcome="refused") == 1


async def test_a_pod_of_quorums_profile_is_bound() -> None:
    world = world_serving("quorum", "quorum-tls")
    obj = gang_pod("mine")
    obj["spec"]["schedulerName"] = "quorum-tls"
    world.add(obj)
    assert await world.bind("mine", "b0-r0-n0") == ""
    assert [(b[1], b[3]) for b in world.actions.binds] == [("mine", "b0-r0-n0")]


async def test_a_bind_without_a_pod_uid_is_refused() -> None:
    world = World()
    world.add(gang_pod("anon"))
    answer = await world.coordinator.bind("ml", "anon", "", "b0-r0-n0")
    assert "names no pod UID" in answer
    assert world.actions.binds == []
