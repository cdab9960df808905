"""The gang registry: the one owner of gang state, whose forgetting reaches every part's table."""

from __future__ import annotations

from extender.gang.core import Core
from extender.gang.registry import GangRegistry
from extender.gang.state import GangState

from .fixtures import World, gang_of
from .fixtures import gang_pod as pod


def _rows(registry: GangRegistry, key: str) -> int:
    return sum(1 for table in registry.tables() for k in table.keys() if k == key)


async def test_forgetting_a_gang_leaves_no_entry_in_any_part_table() -> None:
    world = World()
    registry = world.coordinator.registry
    world.add(pod("w0", gang="w", min_count=2))
    world.filter("w0")  # turned away at the quorum gate: the retry notes the rejection
    world.add(pod("w1", gang="w", min_count=2))
    world.filter("w0")  # placed and reserved: phase changes reach reporting, lifecycle, queue
    assert _rows(registry, "ml/w") == len(registry.tables()) >= 4  # every part keeps facts now
    for name in ("w0", "w1"):
        world.cache.delete_pod(world.pods.pop(name))
    assert "ml/w" not in registry.gangs
    assert _rows(registry, "ml/w") == 0
    assert registry.timers.count() == 0
    assert registry.check() == []
    assert world.coordinator.check_invariants() == []


async def test_a_forgotten_gang_gets_fresh_facts_that_are_not_kept() -> None:
    """A task that awaited may hold a gang the registry has since forgotten (or replaced by a new
    gang of the same key): what it writes must neither leak nor reach the new gang."""
    world = World()
    gang_of(world, 2, min_count=2)
    world.filter("w0")
    registry = world.coordinator.registry
    table = registry.table(lambda: {"n": 0})
    current = registry.state("ml/w")
    table.of(current)["n"] = 1
    detached = GangState("ml/w", first_seen=0.0)
    table.of(detached)["n"] = 2
    assert table.of(current) == {"n": 1}
    assert table.of(detached) == {"n": 0}
    assert registry.check() == []


def test_core_holds_no_gang_state() -> None:
    """Core is a bag of shared collaborators: nothing in it is a gang, a timer or a task set."""
    world = World()
    core = world.coordinator.core
    assert isinstance(core, Core)
    assert not any(isinstance(value, (dict, set, list)) for value in vars(core).values())
