"""The bindings' two tiers of connections (``extender.adapters.bind_connections``), against the
recording fake apiserver: a burst's extra connections close once idle, the kept ones stay open and
carry the next binding, and both tiers send a rotated token."""

from __future__ import annotations

import asyncio

import pytest

from extender.adapters.bind_connections import BindTiers

from .fake_apiserver import FakeApiserver
from .fixtures import kube_world

pytestmark = pytest.mark.event_loops

BINDING = "/api/v1/namespaces/ml/pods/p{}/binding"


async def open_connections_settle(api: FakeApiserver, want: int, seconds: float = 5.0) -> int:
    """The fake apiserver's open connections once they reach ``want`` (or after ``seconds``)."""
    for _ in range(int(seconds / 0.05)):
        if api.open_connections() == want:
            break
        await asyncio.sleep(0.05)
    return api.open_connections()


async def test_a_bursts_extra_connections_close_and_the_kept_ones_carry_the_next_binding() -> None:
    tiers = BindTiers(kept=2, kept_idle_seconds=60.0, burst=8, burst_idle_seconds=0.2)
    async with kube_world(tiers) as world:
        world.api.slow = [0.2] * 10
        await asyncio.gather(*(world.client.bind_pod("ml", f"p{i}", f"u{i}", "node-a") for i in range(10)))
        assert world.api.most_in_flight == 10 and len(world.api.connections) == 10
        assert await open_connections_settle(world.api, 2) == 2
        await asyncio.sleep(0.5)  # the burst tier's idle time twice over: the kept two stay open
        assert world.api.open_connections() == 2
        await world.client.bind_pod("ml", "p10", "u10", "node-a")
        assert len(world.api.connections) == 10  # no new connection, no handshake in front of it
        assert world.api.to("POST", BINDING.format(10))


async def test_bindings_in_flight_are_capped_by_both_tiers_together() -> None:
    async with kube_world(BindTiers(kept=2, burst=3)) as world:
        world.api.slow = [0.1] * 12
        await asyncio.gather(*(world.client.bind_pod("ml", f"p{i}", f"u{i}", "node-a") for i in range(12)))
        assert world.api.most_in_flight == 5
        assert world.client.binds.kept_in_flight == 0


async def test_a_rotated_token_goes_out_on_both_tiers() -> None:
    async with kube_world(BindTiers(kept=1, burst=4)) as world:
        world.api.slow = [0.1] * 3
        await asyncio.gather(*(world.client.bind_pod("ml", f"p{i}", f"u{i}", "node-a") for i in range(3)))
        world.client.set_token("rotated")
        world.api.slow = [0.1] * 3
        await asyncio.gather(*(world.client.bind_pod("ml", f"q{i}", f"u{i}", "node-a") for i in range(3)))
        late = world.api.to("POST", "/api/v1/namespaces/ml/pods/q")
        assert len(late) == 3 and {r.authorization for r in late} == {"Bearer rotated"}
