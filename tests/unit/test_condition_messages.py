"""A PodGroup condition's message follows the gang's reason, not only its status and reason."""

from __future__ import annotations

import asyncio
from typing import Any

from .fixtures import Clock, bound, make_pod
from .test_lifecycle import group_gang, lifecycle_world

SCHEDULED = "PodGroupInitiallyScheduled"


def _scheduled(world: Any, key: str) -> tuple[bool, str, str] | None:
    for c in world.actions.conditions.get(key, []):
        if c.type == SCHEDULED:
            return (c.status, c.reason, c.message)
    return None


async def test_the_unschedulable_message_follows_the_gangs_reason_at_most_every_30_seconds() -> None:
    """Once set, the condition must not keep its first message while the gang's reason moves on (seen
    on a real PodGroup: the message still named the members' arrival after the gang was found not
    to fit). A shortfall that changes with every pod freed is an Event each time, but a PodGroup
    write at most every 30 s (under oversubscription these writes outnumbered the binds)."""
    clock = Clock()
    world = lifecycle_world(clock=clock)
    nodes = sorted(world.cache.nodes)
    for i, node in enumerate(nodes[:-1]):  # one node free: a gang of 3 whole-node members waits
        world.add(bound(make_pod(f"blocker-{i}", f"uid-blocker-{i}", gpus=8), node))
    names = group_gang(world, "big", 3)
    assert not world.filter(names[0]).passing
    await asyncio.sleep(0)
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
