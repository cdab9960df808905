"""A gang that did not fit is not placed by a member kube-scheduler has not turned away while mates
it did turn away wait to be retried (``gates.parked_mates_gate``): kube-scheduler queues those
behind every pod it has not tried, and the gang's reservation would idle until they come round."""

from __future__ import annotations

import asyncio

from extender.gang.state import Claim

from .fixtures import World, gang_of, gang_pod, make_node


def turned_away(world: World, names: list[str]) -> None:
    """kube-scheduler tried these members, Quorum found no room, and it recorded the rejection."""
    for name in names:
        assert not world.filter(name).passing
        world.pods[name]["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
        world.cache.upsert_pod(world.pods[name])


def room_for_the_gang(world: World) -> None:
    world.cache.upsert_node(make_node("b9-r9-n9", "b9", "b9-r9", gpus=64))
    world.names.append("b9-r9-n9")


async def test_a_fresh_member_waits_for_its_turned_away_mates_and_the_first_of_them_places_the_gang() -> None:
    world = World()
    gang_of(world, 5, min_count=5, gpus=4, required="rack")
    turned_away(world, ["w0", "w1", "w2", "w3"])
    room_for_the_gang(world)
    deferred = world.filter("w4")
    assert deferred.passing == []
    assert "4 of its members wait to be retried, this one with them" in deferred.reason
    assert world.coordinator.reserved_nodes() == []
    assert world.sample("quorum_placements_total", result="deferred") == 1
    placed = world.filter("w0")  # the first turned-away member to come round
    assert placed.passing == ["b9-r9-n9"]
    assert sorted(world.coordinator.reservation_of("ml/w")) == [f"uid-w{i}" for i in range(5)]
    await asyncio.sleep(0)
    assert sorted(world.actions.requeued) == ["w1", "w2", "w3", "w4"]  # the reservation wakes them
    assert world.sample("quorum_placements_total", result="fit") == 1


async def test_the_gang_holding_the_queues_claim_is_placed_by_any_member() -> None:
    """No other gang may use the claimed room: waiting for the turned-away mates would idle it."""
    world = World()
    gang_of(world, 5, min_count=5, gpus=4, required="rack")
    turned_away(world, ["w0", "w1", "w2", "w3"])
    room_for_the_gang(world)
    queue = world.coordinator.queue
    queue.claim = Claim(gang="ml/w", priority=0, made_at=0.0, waiting_since=0.0, level="rack",
                        domain="b9/b9-r9", nodes=frozenset({"b9-r9-n9"}), missing=0,
                        grandfathered=frozenset(), envelope={}, needed=5)
    assert world.filter("w4").passing == ["b9-r9-n9"]
    assert world.sample("quorum_placements_total", result="deferred") == 0


async def test_a_gang_waiting_for_members_is_placed_by_the_member_that_completes_it() -> None:
    """Members turned away because the gang was incomplete are no sign of a gang that did not fit."""
    world = World()
    names = gang_of(world, 3, min_count=4, gpus=4)
    for name in names:
        assert not world.filter(name).passing
    world.add(gang_pod("w3", gang="w", min_count=4, gpus=4))
    assert world.filter("w3").passing
    assert world.sample("quorum_placements_total", result="deferred") == 0

