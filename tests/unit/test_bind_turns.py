"""A gang's bindings go out together, whole batches while at most ``gang.bindingsAtOnce`` are in
flight.

On the benchmark cluster (1,000 nodes, 250 gangs of 16) with every gang's bindings sent as soon as
it reached quorum, a gang's members were bound over a median 217 ms and the worst over 1.6 s: at
a busy apiserver its bindings waited behind other gangs'. One or two gangs at a time, the median
was 23-31 ms (docs/benchmarks.md, "The bind skew").
"""

from __future__ import annotations

import asyncio

import pytest

from extender.config import GangTimings
from extender.gang import binding
from extender.gang.bind_turns import BindTurns

from .fixtures import World, gang_of


class HeldBindings:
    """Bindings that start when sent and finish only when the test lets them."""

    def __init__(self, world: World) -> None:
        self.started: list[str] = []
        self.finish: dict[str, asyncio.Event] = {}
        self._bind = world.actions.bind_pod
        world.actions.bind_pod = self.bind_pod  # type: ignore[method-assign]

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.started.append(name)
        await self.finish.setdefault(name, asyncio.Event()).wait()
        await self._bind(namespace, name, uid, node)

    def let_finish(self, *names: str) -> None:
        for name in names:
            self.finish.setdefault(name, asyncio.Event()).set()


async def _two_gangs_at_bind(world: World) -> tuple[HeldBindings, list[asyncio.Task[str]]]:
    """Gang a reaches quorum at bind first, gang b just after; both fit."""
    held = HeldBindings(world)
    calls = []
    for prefix in ("a", "b"):
        for name in gang_of(world, 2, 2, prefix=prefix):
            node = world.filter(name).passing[0]
            calls.append(asyncio.create_task(world.bind(name, node)))
            await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    return held, calls


async def test_the_next_gangs_bindings_wait_for_the_gang_binding_before_it() -> None:
    world = World(GangTimings(bindings_at_once=2))
    held, calls = await _two_gangs_at_bind(world)
    assert sorted(held.started) == ["a0", "a1"], "gang b's bindings went out beside gang a's"
    held.let_finish("a0", "a1")
    await asyncio.sleep(0.01)
    assert sorted(held.started) == ["a0", "a1", "b0", "b1"]
    held.let_finish("b0", "b1")
    assert await asyncio.gather(*calls) == ["", "", "", ""]


async def test_each_finished_binding_makes_room_for_the_next_gang_beside_the_tail() -> None:
    """Room is given back binding by binding: gang b need not wait for gang a's slowest binding."""
    world = World(GangTimings(bindings_at_once=3))
    held, calls = await _two_gangs_at_bind(world)
    assert sorted(held.started) == ["a0", "a1"], "gang b's 2 bindings do not fit beside gang a's 2 in 3"
    held.let_finish("a0")
    await asyncio.sleep(0.01)
    assert sorted(held.started) == ["a0", "a1", "b0", "b1"], "a0's room was kept until a1 finished too"
    held.let_finish("a1", "b0", "b1")
    assert await asyncio.gather(*calls) == ["", "", "", ""]


async def test_with_no_limit_every_gang_binds_at_once() -> None:
    world = World(GangTimings(bindings_at_once=0))
    held, calls = await _two_gangs_at_bind(world)
    assert sorted(held.started) == ["a0", "a1", "b0", "b1"]
    held.let_finish("a0", "a1", "b0", "b1")
    assert await asyncio.gather(*calls) == ["", "", "", ""]


async def test_a_batch_slower_than_its_turn_lets_the_next_gang_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow apiserver must not stall every gang behind one gang's bindings."""
    monkeypatch.setattr(binding, "BIND_TURN_SECONDS", 0.05)
    world = World(GangTimings(bindings_at_once=2))
    held, calls = await _two_gangs_at_bind(world)
    assert sorted(held.started) == ["a0", "a1"]
    await asyncio.sleep(0.1)
    assert sorted(held.started) == ["a0", "a1", "b0", "b1"], "gang a's slow batch kept gang b waiting"
    held.let_finish("a0", "a1", "b0", "b1")
    assert await asyncio.gather(*calls) == ["", "", "", ""]


async def _settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_turns_count_bindings_whole_batches_first_come_first_served() -> None:
    turns = BindTurns(8)
    granted: list[str] = []

    async def batch(name: str, size: int) -> None:
        await turns.take(size)
        granted.append(name)

    tasks = [asyncio.create_task(batch(name, size)) for name, size in
             (("a", 4), ("b", 4), ("c", 12), ("d", 1))]
    await _settled()
    assert granted == ["a", "b"], "two batches of 4 fill 8"
    turns.give_back(4)
    tasks.append(asyncio.create_task(batch("e", 1)))  # would fit beside b, but c and d came first
    await _settled()
    assert granted == ["a", "b"], "c, larger than the limit, waits for the whole room; no one overtakes it"
    turns.give_back(4)
    await _settled()
    assert granted == ["a", "b", "c"] and turns.in_flight == 12, "a batch larger than the limit goes alone"
    turns.give_back(12)
    await _settled()
    assert granted == ["a", "b", "c", "d", "e"]
    await asyncio.gather(*tasks)


async def test_a_batch_cancelled_while_waiting_keeps_no_one_waiting() -> None:
    turns = BindTurns(2)
    await turns.take(2)
    waiting = asyncio.create_task(turns.take(2))
    after = asyncio.create_task(turns.take(1))
    await _settled()
    waiting.cancel()
    await _settled()
    turns.give_back(2)
    await _settled()
    assert after.done() and turns.in_flight == 1
