"""The live ``PodGroupSatisfied`` condition (KEP-6413's planned wording): whether ``minCount``
members are scheduled right now, kept up to date as members are lost and replaced."""

from __future__ import annotations

import asyncio
from typing import Any

from extender.gang.effects import CONDITION_PODS_READY, CONDITION_SATISFIED

from .fixtures import bound, gang_pod, make_pod, make_podgroup, schedule
from .test_lifecycle import LifecycleWorld, deliver, drop, group_gang, lifecycle_world, ready


def satisfied(world: Any, key: str = "ml/g") -> tuple[bool, str, str] | None:
    """The condition as last applied to the PodGroup (None: never written)."""
    for c in world.actions.conditions.get(key, []):
        if c.type == CONDITION_SATISFIED:
            return (c.status, c.reason, c.message)
    return None


def count_applies(world: LifecycleWorld) -> list[int]:
    """Counts every condition apply from now on (each sends the whole set of conditions)."""
    calls = [0]
    record = world.actions.set_gang_conditions

    async def counted(home: Any, conditions: list[Any]) -> None:
        calls[0] += 1
        await record(home, conditions)
    world.actions.set_gang_conditions = counted  # type: ignore[method-assign]
    return calls


async def test_true_once_bound_false_when_a_member_fails_true_again_when_its_replacement_binds() -> None:
    world = lifecycle_world(recovery_timeout_seconds=30)
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    await asyncio.sleep(0)
    assert satisfied(world) == (True, "MinCountSatisfied", "3 of 3 members scheduled")

    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    await asyncio.sleep(0)
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    assert satisfied(world) == (False, "BelowMinCount", "2 of 3 members scheduled")

    await schedule(world, group_gang(world, "g", 1, start=3))
    await asyncio.sleep(0)
    assert world.coordinator.phase_of("ml/g") == "Bound"
    assert satisfied(world) == (True, "MinCountSatisfied", "3 of 3 members scheduled")


async def test_a_second_loss_while_recovering_updates_the_count_without_a_phase_change() -> None:
    world = lifecycle_world(recovery_timeout_seconds=30)
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    await asyncio.sleep(0)
    assert satisfied(world) == (False, "BelowMinCount", "2 of 3 members scheduled")
    world.cache.delete_pod(world.pods.pop("g1"))  # still Recovering: no phase change to report it
    await asyncio.sleep(0)
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    assert satisfied(world) == (False, "BelowMinCount", "1 of 3 members scheduled")


async def test_an_extra_member_lost_above_min_count_keeps_it_true_with_the_new_count() -> None:
    """A Bound gang with a member beyond ``minCount`` stays Bound when it loses one: the count moves."""
    world = lifecycle_world()
    world.cache.upsert_podgroup(make_podgroup("g", 2))
    names = ["g0", "g1", "g2"]
    for name in names:
        world.add(gang_pod(name, podgroup="g", gpus=8))
    await schedule(world, names)
    await asyncio.sleep(0)
    assert satisfied(world) == (True, "MinCountSatisfied", "3 of 2 members scheduled")
    deliver(world, ready(world.pods["g2"], phase="Failed", is_ready=False))
    await asyncio.sleep(0)
    assert world.coordinator.phase_of("ml/g") == "Bound"
    assert satisfied(world) == (True, "MinCountSatisfied", "2 of 2 members scheduled")
    deliver(world, ready(world.pods["g1"], phase="Failed", is_ready=False))
    await asyncio.sleep(0)
    assert satisfied(world) == (False, "BelowMinCount", "1 of 2 members scheduled")


async def test_members_on_a_deleted_node_no_longer_count() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    world.cache.upsert_podgroup(make_podgroup("g", 2))
    names = ["g0", "g1", "g2"]
    for name in names:
        world.add(gang_pod(name, podgroup="g", gpus=8))
    nodes = await schedule(world, names)
    world.cache.delete_node(nodes["g0"])  # the extra's loss changes no phase
    await asyncio.sleep(0.01)
    assert world.coordinator.phase_of("ml/g") == "Bound"
    assert satisfied(world) == (True, "MinCountSatisfied", "2 of 2 members scheduled")
    drop(world, ["g0"])
    await asyncio.sleep(0)
    assert satisfied(world) == (True, "MinCountSatisfied", "2 of 2 members scheduled")


async def test_it_is_written_only_when_it_changes() -> None:
    """Repeated watch events and the deletion of a member already counted as lost move no count:
    no apply (a gang of hundreds must not rewrite its PodGroup per pod event)."""
    world = lifecycle_world(recovery_timeout_seconds=30)
    calls = count_applies(world)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    for name in names:
        deliver(world, ready(world.pods[name]))
    await asyncio.sleep(0)
    settled = calls[0]
    for name in names:
        deliver(world, ready(world.pods[name]))
    await asyncio.sleep(0)
    assert satisfied(world) == (True, "MinCountSatisfied", "2 of 2 members scheduled")
    assert calls[0] == settled
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    await asyncio.sleep(0)
    assert satisfied(world) == (False, "BelowMinCount", "1 of 2 members scheduled")
    assert calls[0] == settled + 1  # one apply for the phase change, the count with it
    drop(world, ["g0"])
    await asyncio.sleep(0)
    assert calls[0] == settled + 1


async def test_a_gang_that_never_reached_quorum_has_no_such_condition() -> None:
    """Before its first quorum the gang says Unschedulable (PodGroupInitiallyScheduled) and nothing more."""
    world = lifecycle_world()
    for i, node in enumerate(sorted(world.cache.nodes)[:-1]):  # one node free for a gang of 3
        world.add(bound(make_pod(f"blocker-{i}", f"uid-blocker-{i}", gpus=8), node))
    names = group_gang(world, "g", 3)
    assert world.filter(names[0]).passing == []
    await asyncio.sleep(0)
    assert {c.type for c in world.actions.conditions["ml/g"]} == {"PodGroupInitiallyScheduled"}
    assert satisfied(world) is None


async def test_a_gang_whose_members_succeeded_stays_satisfied_and_ready_and_writes_nothing() -> None:
    """Members that finished their work were scheduled: a finishing gang is done, not short of
    members, and its members completing one by one are no PodGroup write each."""
    world = lifecycle_world()
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    for name in names:
        deliver(world, ready(world.pods[name]))
    await asyncio.sleep(0)
    pods_ready = [c for c in world.actions.conditions["ml/g"] if c.type == CONDITION_PODS_READY]
    assert [(c.status, c.reason) for c in pods_ready] == [(True, "PodsReady")]
    calls = count_applies(world)
    for name in names:
        deliver(world, ready(world.pods[name], phase="Succeeded", is_ready=False))
        await asyncio.sleep(0)
    assert satisfied(world) == (True, "MinCountSatisfied", "3 of 3 members scheduled")
    assert [c for c in world.actions.conditions["ml/g"] if c.type == CONDITION_PODS_READY] == pods_ready
    assert calls[0] == 0


async def test_a_finished_gang_whose_pods_are_deleted_writes_nothing_more() -> None:
    """A Job's finished pods are deleted later (its TTL, a cleanup): the gang did its work, so its
    PodGroup keeps saying so, and the deletions are no write each."""
    world = lifecycle_world()
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    for name in names:
        deliver(world, ready(world.pods[name]))
    for name in names:
        deliver(world, ready(world.pods[name], phase="Succeeded", is_ready=False))
    await asyncio.sleep(0)
    before = list(world.actions.conditions["ml/g"])
    calls = count_applies(world)
    events = len(world.actions.events)
    for name in names:
        drop(world, [name])
        await asyncio.sleep(0)
    assert satisfied(world) == (True, "MinCountSatisfied", "3 of 3 members scheduled")
    assert world.actions.conditions["ml/g"] == before
    assert (calls[0], world.actions.events[events:]) == (0, [])
