"""A PodGroup condition's message follows the gang's reason, not only its status and reason."""

from __future__ import annotations

import asyncio
from typing import Any

from .fixtures import Clock, bound, make_pod
from .payloads import make_podgroup
from .test_lifecycle import group_gang, lifecycle_world

SCHEDULED = "PodGroupInitiallyScheduled"


def _scheduled(world: Any, key: str) -> tuple[bool, str, str] | None:
    for c in world.actions.conditions.get(key, []):
        if c.type == SCHEDULED:
            return (c.status, c.reason, c.message)
    return None


async def _short_of_one_node(clock: Clock) -> tuple[Any, list[str]]:
    """A gang of 3 whole-node members with one node free: it waits, its condition says so."""
    world = lifecycle_world(clock=clock)
    nodes = sorted(world.cache.nodes)
    for i, node in enumerate(nodes[:-1]):
        world.add(bound(make_pod(f"blocker-{i}", f"uid-blocker-{i}", gpus=8), node))
    names = group_gang(world, "big", 3)
    assert not world.filter(names[0]).passing
    await asyncio.sleep(0)
    return world, names


async def test_the_unschedulable_message_follows_the_gangs_reason_at_most_every_30_seconds() -> None:
    """Once set, the condition must not keep its first message while the gang's reason moves on (seen
    on a real PodGroup: the message still named the members' arrival after the gang was found not
    to fit). A shortfall that changes with every pod freed is an Event each time, but a PodGroup
    write at most every 30 s (under oversubscription these writes outnumbered the binds)."""
    clock = Clock()
    world, names = await _short_of_one_node(clock)
    before = _scheduled(world, "ml/big")
    assert before is not None and before[:2] == (False, "Unschedulable"), before

    world.cache.delete_pod(world.pods.pop("blocker-0"))  # two nodes free: still short, by one
    clock.now += 29.9
    assert not world.filter(names[0]).passing
    await asyncio.sleep(0)
    reason = world.coordinator.reason_of("ml/big")
    assert reason != before[2]
    assert world.actions.events[-1][2:] == ("NoFit", "NoFit", reason)  # the Event has it at once
    assert _scheduled(world, "ml/big") == before  # the condition not yet

    # Asked again, the gang's remembered no-fit is the answer and nothing is reported: the newest
    # text still reaches the condition once the 30 s are over.
    assert not world.filter(names[0]).passing
    clock.now += 0.1
    await asyncio.sleep(0.15)
    after = _scheduled(world, "ml/big")
    assert after is not None and after[:2] == (False, "Unschedulable"), after
    assert after[2] == reason, f"the condition still says {after[2]!r}; the gang's reason is {reason!r}"


def _shown(world: Any, name: str, conditions: list[tuple[str, str, str]]) -> None:
    """The PodGroup as the watch shows it after some writer set these (status, reason, message)."""
    obj = make_podgroup(name, 3)
    obj["status"] = {"conditions": [
        {"type": SCHEDULED, "status": status, "reason": reason, "message": message,
         "lastTransitionTime": "2026-11-29T00:00:00Z"} for status, reason, message in conditions]}
    world.cache.upsert_podgroup(obj)


async def test_a_shortfall_kube_schedulers_group_cycle_replaced_is_put_back_at_most_every_30_s() -> None:
    """With GenericWorkload on, kube-scheduler writes PodGroupInitiallyScheduled itself after each
    group cycle ("pod group is unschedulable"). Seen on a real cluster: it replaced Quorum's shortfall
    two seconds after Quorum wrote it, and the condition kept kube-scheduler's text for good."""
    clock = Clock()
    world, _ = await _short_of_one_node(clock)
    ours = _scheduled(world, "ml/big")
    assert ours is not None and "fit" in ours[2], ours

    # Quorum's own write comes back through the watch: nothing to put back.
    world.actions.conditions.clear()
    _shown(world, "big", [("False", "Unschedulable", ours[2])])
    await asyncio.sleep(0)
    assert _scheduled(world, "ml/big") is None

    foreign = [("False", "Unschedulable", "pod group is unschedulable")]
    _shown(world, "big", foreign)
    await asyncio.sleep(0)
    assert _scheduled(world, "ml/big") == ours, "kube-scheduler's text must not replace the gang's shortfall"

    # Quorum's write makes kube-scheduler retry the group and write its own again: the next answer
    # waits for the 30 s, or the two writers would take turns at every cycle.
    world.actions.conditions.clear()
    _shown(world, "big", [("False", "Unschedulable", ours[2])])
    clock.now += 1
    _shown(world, "big", foreign)
    await asyncio.sleep(0)
    assert _scheduled(world, "ml/big") is None, "put back twice within 30 s"
    clock.now += 28.9
    _shown(world, "big", foreign)
    await asyncio.sleep(0)
    assert _scheduled(world, "ml/big") is None, "put back twice within 30 s"
    clock.now += 0.1  # the timer armed for the rest of the 30 s looks again
    await asyncio.sleep(0.15)
    assert _scheduled(world, "ml/big") == ours


async def test_a_condition_quorum_sent_earlier_is_an_echo_and_is_not_written_again() -> None:
    """The watch may still show an older value Quorum sent while its newer one is on its way."""
    clock = Clock()
    world, names = await _short_of_one_node(clock)
    older = _scheduled(world, "ml/big")
    world.cache.delete_pod(world.pods.pop("blocker-0"))
    clock.now += 30
    assert not world.filter(names[0]).passing
    await asyncio.sleep(0)
    newer = _scheduled(world, "ml/big")
    assert older is not None and newer is not None and older != newer, (older, newer)

    world.actions.conditions.clear()
    _shown(world, "big", [("False", "Unschedulable", older[2])])
    await asyncio.sleep(0)
    assert _scheduled(world, "ml/big") is None, "Quorum's own older value was taken for another writer's"
