"""A running sliced gang that loses a member gets its replacement back into the slice that lost it."""

from __future__ import annotations

import asyncio
from typing import Any

from .fixtures import bound, gang_pod, make_pod
from .test_lifecycle import deliver, lifecycle_world, ready

SLICE_ANNOTATIONS = {"kueue.x-k8s.io/podset-slice-required-topology": "topology.quorum.dev/rack",
                     "kueue.x-k8s.io/podset-slice-size": "2"}


def sliced_member(name: str) -> dict[str, Any]:
    pod = gang_pod(name, "s", 4, gpus=2)
    pod["metadata"]["annotations"].update(SLICE_ANNOTATIONS)
    return pod


def blocker(world: Any, name: str, node: str, gpus: int) -> None:
    world.add(bound(make_pod(name, f"uid-{name}", gpus=gpus), node))


async def test_the_replacement_goes_to_the_rack_whose_slice_lost_it_not_the_tightest_node() -> None:
    world = lifecycle_world(recovery_timeout_seconds=30)
    home = "b0-r0-n0"
    for node in sorted(world.cache.nodes):
        if node != home:
            blocker(world, f"full-{node}", node, 8)
    names = [f"s{i}" for i in range(4)]
    for name in names:
        world.add(sliced_member(name))
    for name in names:
        passing = world.filter(name).passing
        assert passing == [home], (name, passing, world.coordinator.reason_of("ml/s"))
    assert await asyncio.gather(*(world.bind(name, home) for name in names)) == [""] * 4
    for name in names:
        world.bind_in_cache(name, home)
    assert world.coordinator.phase_of("ml/s") == "Bound"

    deliver(world, ready(world.pods["s0"], phase="Failed", is_ready=False))
    assert world.coordinator.phase_of("ml/s") == "Recovering"
    # Now: the failed member's spot is taken, its rack's other node is free, and a node of another
    # rack has exactly one member's room: the tightest fit, where an unsliced replacement would go.
    blocker(world, "late", home, 2)
    world.cache.delete_pod(world.pods.pop("full-b0-r0-n1"))
    world.cache.delete_pod(world.pods.pop("full-b1-r0-n0"))
    blocker(world, "most-of-b1-r0-n0", "b1-r0-n0", 6)

    world.add(sliced_member("s4"))
    passing = world.filter("s4").passing
    assert passing == ["b0-r0-n1"], (passing, world.coordinator.reason_of("ml/s"))
