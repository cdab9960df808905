"""Which phase changes become Events: a gang passing through Reserved and Binding on its way to
Bound says only Bound; one held there says so after ``PASSING_EVENT_SECONDS``; a gang whose members
succeeded says it is finishing, not that it waits for members."""

from __future__ import annotations

import asyncio

import pytest

from extender.gang import reporting

from .fixtures import schedule
from .test_lifecycle import deliver, group_gang, lifecycle_world, ready


@pytest.fixture(autouse=True)
def short_passing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reporting, "PASSING_EVENT_SECONDS", 0.05)


async def test_a_gang_bound_at_once_records_bound_alone() -> None:
    world = lifecycle_world()
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    await asyncio.sleep(0.1)  # past the passing phases' deferral
    assert world.actions.event_reasons("g") == ["Bound"]


async def test_a_gang_held_in_reserved_records_it_once_the_deferral_is_over() -> None:
    world = lifecycle_world()
    names = group_gang(world, "g", 3)
    assert world.filter(names[0]).passing  # placed and reserved; the other members do not come
    assert world.coordinator.phase_of("ml/g") == "Reserved"
    assert world.actions.event_reasons("g") == []
    await asyncio.sleep(0.1)
    assert world.actions.event_reasons("g") == ["Reserved"]
    [(_, _, _, _, note)] = [e for e in world.actions.events if e[2] == "Reserved"]
    assert note.startswith("gang ml/g: reserved in ")


async def test_a_gang_held_in_binding_records_binding_but_not_the_reserved_it_passed() -> None:
    world = lifecycle_world()
    names = group_gang(world, "g", 2)
    node = world.filter(names[0]).passing[0]
    world.filter(names[1])
    held = asyncio.ensure_future(world.bind(names[0], node))  # held until the gang's quorum
    await asyncio.sleep(0.1)
    assert world.coordinator.phase_of("ml/g") == "Binding"
    assert world.actions.event_reasons("g") == ["Binding"]
    held.cancel()


async def test_members_succeeding_make_a_finishing_event_not_waiting_for_members() -> None:
    world = lifecycle_world()
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    for name in names:
        deliver(world, ready(world.pods[name]))
    deliver(world, ready(world.pods[names[0]], phase="Succeeded", is_ready=False))
    await asyncio.sleep(0)
    assert world.actions.event_reasons("g") == ["Bound", "PodsReady", "Finishing"]
    assert world.actions.events[-1][4] == "gang ml/g: its members are finishing (1 succeeded)"
