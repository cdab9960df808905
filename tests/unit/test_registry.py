"""The gang registry: the one owner of gang state, whose forgetting reaches every part's table."""

from __future__ import annotations

import copy

from extender.gang.core import Core
from extender.gang.registry import GangRegistry
from extender.gang.state import GangState

from .fixtures import World, gang_of
from .fixtures import gang_pod as pod
from .payloads import make_node


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


def _counts(registry: GangRegistry, key: str) -> tuple[int, int, int]:
    """(running, Ready, alive) as the registry reads them from the cache's member states."""
    return (registry.running_count(key), registry.ready_count(key),
            registry.core.cache.membership.alive_count(key))


def _with_status(obj: dict[str, object], *, ready: bool = False, phase: str = "Running",
                 deleting: bool = False) -> dict[str, object]:
    out = copy.deepcopy(obj)
    out["status"] = {"phase": phase, "startTime": "2026-01-01T00:00:00Z",
                     "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if deleting:
        out["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"  # type: ignore[index]
    return out


async def test_a_gangs_counts_follow_its_members_through_their_lives() -> None:
    """Running, Ready and alive members are counted as the watch moves them, not by walking the
    gang: bound, Ready, on a node gone not Ready, evicted, deleting, finished, deleted."""
    world = World()
    registry = world.coordinator.registry
    names = gang_of(world, 3, min_count=2)
    assert _counts(registry, "ml/w") == (0, 0, 3)
    world.filter("w0")
    for name, node in (("w0", "b0-r0-n0"), ("w1", "b0-r0-n1"), ("w2", "b0-r0-n1")):
        world.bind_in_cache(name, node)
    assert _counts(registry, "ml/w") == (3, 0, 3)
    for name in names:
        world.add(_with_status(world.pods[name], ready=True))
    assert _counts(registry, "ml/w") == (3, 3, 3)
    not_ready = make_node("b0-r0-n1", "b0", "b0-r0")
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    world.cache.upsert_node(not_ready)
    assert _counts(registry, "ml/w") == (3, 1, 3)  # w1 and w2 run on a node that is not Ready
    registry.state("ml/w").evicting.add("uid-w0")
    assert _counts(registry, "ml/w") == (2, 0, 3)
    registry.state("ml/w").evicting.clear()
    world.add(_with_status(world.pods["w1"], ready=True, deleting=True))
    assert _counts(registry, "ml/w") == (2, 1, 2)
    world.add(_with_status(world.pods["w2"], phase="Succeeded"))
    assert _counts(registry, "ml/w") == (1, 1, 1)
    world.cache.delete_pod(world.pods.pop("w0"))
    assert _counts(registry, "ml/w") == (0, 0, 0)
    assert registry.check() == []


async def test_counts_that_drift_from_the_members_are_reported() -> None:
    world = World()
    registry = world.coordinator.registry
    gang_of(world, 2, min_count=2)
    world.filter("w0")
    world.cache.membership.in_state["pending"]["ml/w"].discard("uid-w1")  # a state set that missed an event
    assert registry.check() == ["gang ml/w: (running, Ready, alive) members counted (0, 0, 1), "
                                "walking them gives (0, 0, 2)"]


async def test_a_bind_sent_for_a_member_seen_deleting_counts_until_it_is_answered() -> None:
    """kube-scheduler may bind a pod the watch has already shown being deleted (it had not seen
    that yet). While that binding is under way it counts, as any bind in flight does: it may land,
    and the kept count must say what walking the members says."""
    world = World()
    registry = world.coordinator.registry
    gang_of(world, 2, min_count=2)
    world.filter("w0")
    world.add(_with_status(world.pods["w1"], phase="Pending", deleting=True))
    assert registry.running_count("ml/w") == 0
    world.coordinator.core.ledger.mark_inflight("uid-w1", "b0-r0-n0", world.cache.pods["uid-w1"].requests)
    assert registry.running_count("ml/w") == 1
    assert registry.check() == []
    world.coordinator.core.ledger.clear_inflight("uid-w1")  # the apiserver refused it
    assert registry.running_count("ml/w") == 0
    assert registry.check() == []
