"""A reserved gang whose members stop reaching bind while other gangs wait for capacity is
released early (``gang.stallSeconds``).

kube-scheduler retries a member that one of its own filters also turned away only on a cluster
event; failing the held binds is one. These tests drive the coordinator the way kube-scheduler
does: filter, then bind calls that Quorum holds until quorum.
"""

from __future__ import annotations

import asyncio

from extender.config import GangTimings

from .fixtures import World, gang_of


def a_gang_waits_for_capacity(world: World) -> None:
    """Nine whole-node members on the world's eight nodes: the gang is answered "does not fit"."""
    gang_of(world, 9, min_count=9, prefix="big", gpus=8)
    assert world.filter("big0").passing == []


async def test_a_gang_whose_members_stop_reaching_bind_is_released_early_and_placed_again_at_once() -> None:
    world = World(GangTimings(bind_timeout_seconds=5, stall_seconds=0.05))
    gang_of(world, 3, min_count=3, gpus=2)
    a_gang_waits_for_capacity(world)
    world.filter("w0")
    answer = await world.bind("w0", world.coordinator.reservation_of("ml/w")["uid-w0"])
    assert "no member reached bind for 0.05s (1/3 held)" in answer
    assert world.coordinator.reservation_of("ml/w") == {} and world.coordinator.held_binds("ml/w") == []
    assert world.sample("quorum_reservation_releases_total", reason="stalled") == 1
    assert world.sample("quorum_reservation_timeouts_total") == 0
    # No backoff: the members the failed bind brings back place the gang again and bind it whole.
    assert world.sample("quorum_gang_backoffs_total") == 0
    assert world.coordinator.phase_of("ml/w") != "Backoff"
    nodes = {name: world.filter(name).passing for name in ("w1", "w0", "w2")}
    assert all(nodes.values()), nodes
    answers = await asyncio.gather(*(world.bind(name, passing[0]) for name, passing in nodes.items()))
    assert answers == ["", "", ""]
    assert sorted(pod for pod, _ in world.actions.bound) == ["w0", "w1", "w2"]


async def test_members_that_keep_reaching_bind_keep_the_reservation_past_the_stall_time() -> None:
    world = World(GangTimings(bind_timeout_seconds=5, stall_seconds=0.1))
    gang_of(world, 3, min_count=3, gpus=2)
    a_gang_waits_for_capacity(world)
    reserved = (world.filter("w0"), world.coordinator.reservation_of("ml/w"))[1]
    first = asyncio.ensure_future(world.bind("w0", reserved["uid-w0"]))
    await asyncio.sleep(0.07)
    second = asyncio.ensure_future(world.bind("w1", reserved["uid-w1"]))
    await asyncio.sleep(0.07)  # 0.14 s after the first member, 0.07 s after the last
    assert world.coordinator.held_binds("ml/w") != []
    assert await world.bind("w2", reserved["uid-w2"]) == ""
    assert await first == "" and await second == ""
    assert world.sample("quorum_reservation_releases_total", reason="stalled") == 0


async def test_a_gang_that_stalls_more_than_max_replans_times_backs_off() -> None:
    world = World(GangTimings(bind_timeout_seconds=5, stall_seconds=0.02, max_replans=1,
                              backoff_base_seconds=0.5))
    gang_of(world, 2, min_count=2)
    a_gang_waits_for_capacity(world)
    for _ in range(2):
        world.filter("w0")
        answer = await world.bind("w0", world.coordinator.reservation_of("ml/w")["uid-w0"])
        assert "no member reached bind for 0.02s (1/2 held)" in answer
    assert world.sample("quorum_reservation_releases_total", reason="stalled") == 2
    assert world.coordinator.phase_of("ml/w") == "Backoff"
    assert "backing off 0.5s" in world.coordinator.reason_of("ml/w")


async def test_stall_seconds_zero_leaves_a_stalled_gang_to_the_bind_timeout() -> None:
    world = World(GangTimings(bind_timeout_seconds=0.1, stall_seconds=0))
    gang_of(world, 2, min_count=2)
    a_gang_waits_for_capacity(world)
    world.filter("w0")
    answer = await world.bind("w0", world.coordinator.reservation_of("ml/w")["uid-w0"])
    assert "quorum not reached within 0.1s" in answer
    assert world.sample("quorum_reservation_releases_total", reason="stalled") == 0


async def test_a_stalled_gang_keeps_its_reservation_while_no_other_gang_waits_for_capacity() -> None:
    # Its missing member may wait for something a failed bind does not change (a node selector
    # no node matches yet); with nobody else to use the capacity, only the bind timeout ends it.
    world = World(GangTimings(bind_timeout_seconds=0.3, stall_seconds=0.05))
    gang_of(world, 2, min_count=2)
    world.filter("w0")
    answer = await world.bind("w0", world.coordinator.reservation_of("ml/w")["uid-w0"])
    assert "quorum not reached within 0.3s" in answer
    assert world.sample("quorum_reservation_releases_total", reason="stalled") == 0
