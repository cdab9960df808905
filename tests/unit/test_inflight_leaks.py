"""Binds Quorum counts before the watch shows them are let go when their pod turns out to be gone.

The 10,000-example stateful run found the leak (``ml/g1: 1 running`` with minCount 2, after a
preemption the over-counted gang allowed): a pod bound while the watch was away and deleted before
it came back is never listed, so no event ever cleared its bind in flight, which kept counting on
its node and for its gang. Each test was seen to fail with its half of the fix reverted.
"""

from __future__ import annotations

from typing import Any

from .fixtures import World, gang_of, make_podgroup, schedule
from .fixtures import gang_pod as pod

GPU = "nvidia.com/gpu"


def unseen(world: World, obj: dict[str, Any]) -> dict[str, Any]:
    """A pod kube-scheduler has, that the watch has not delivered (world.filter/bind know it)."""
    world.pods[obj["metadata"]["name"]] = obj
    return obj


def free_gpus(world: World, node: str) -> int:
    free, _ = world.coordinator.core.ledger.free(node, None) or ({}, 0)
    return free.get(GPU, 0)


def relist(world: World, *present: str) -> None:
    """The pod watch came back with a 410: the informer asks for a list and loads it."""
    world.cache.listing_pods()
    world.cache.replace_pods([world.pods[name] for name in present])


async def test_a_pod_bound_and_deleted_while_the_watch_was_away_is_let_go_by_the_relist() -> None:
    world = World()
    unseen(world, pod("plain", gpus=8))
    node = world.filter("plain").passing[0]
    assert await world.bind("plain", node) == ""
    assert free_gpus(world, node) == 0  # counted in flight until the watch shows it
    relist(world)  # deleted before the list: the list never shows it, nor will any watch event
    assert world.coordinator.core.ledger.inflight() == {}
    assert free_gpus(world, node) == 8
    assert world.coordinator.check_invariants() == []


async def test_a_bind_counted_while_the_list_was_being_asked_for_waits_for_the_next_one() -> None:
    """The list may have been taken before the pod was created: absent from it proves nothing."""
    world = World()
    unseen(world, pod("plain", gpus=8))
    node = world.filter("plain").passing[0]
    world.cache.listing_pods()  # asked for; the answer comes back after the bind
    assert await world.bind("plain", node) == ""
    world.cache.replace_pods([])
    assert world.coordinator.core.ledger.inflight() == {"uid-plain": node}
    assert free_gpus(world, node) == 0
    relist(world)  # a later list that still lacks it: the pod is gone
    assert world.coordinator.core.ledger.inflight() == {}
    assert world.coordinator.check_invariants() == []


async def test_a_listed_pod_keeps_its_bind_in_flight_until_the_watch_shows_it_bound() -> None:
    world = World()
    world.add(pod("plain", gpus=8))
    node = world.filter("plain").passing[0]
    assert await world.bind("plain", node) == ""
    relist(world, "plain")  # listed still pending (the list was a moment older than the binding)
    assert world.coordinator.core.ledger.inflight() == {"uid-plain": node}
    world.bind_in_cache("plain", node)
    assert world.coordinator.core.ledger.inflight() == {}
    assert world.coordinator.check_invariants() == []


async def test_an_extra_of_a_running_gang_deleted_unseen_no_longer_counts_as_running() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    await schedule(world, ["w0", "w1"])
    unseen(world, pod("w2", gang="w", min_count=2, gpus=8))
    node = world.filter("w2", ["b1-r0-n0"]).passing[0]  # kube-scheduler's own fit chose it
    assert await world.bind("w2", node) == ""
    assert world.coordinator.registry.running_count("ml/w") == 3  # the extra, through its bind
    relist(world, "w0", "w1")
    assert world.coordinator.registry.running_count("ml/w") == 2
    assert free_gpus(world, node) == 8
    assert world.coordinator.check_invariants() == []


async def test_a_deleted_event_for_a_pod_the_cache_never_took_lets_its_bind_go() -> None:
    """A pod the cache could not take (or never saw) is deleted: its bind in flight goes with it."""
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    await schedule(world, ["w0", "w1"])
    obj = unseen(world, pod("w2", gang="w", min_count=2, gpus=8))
    node = world.filter("w2", ["b1-r0-n0"]).passing[0]  # kube-scheduler's own fit chose it
    assert await world.bind("w2", node) == ""
    world.cache.delete_pod(obj)
    assert world.coordinator.core.ledger.inflight() == {}
    assert world.coordinator.registry.running_count("ml/w") == 2
    assert free_gpus(world, node) == 8
    assert world.coordinator.check_invariants() == []


async def test_a_member_bound_in_flight_then_filed_in_another_gang_leaves_its_first_gang() -> None:
    """Found by the core machine at 10,000 examples: a JobSet's pod bound (from its request) in the
    JobSet's gang while the watch lagged; the JobSet then asked for one gang per Job, and the watch
    showed the pod bound in its Job's gang. The first gang, which counted the bind, stayed Bound with
    no member running. Here the pod's declaration differs between its request and its watch event."""
    world = World()
    for group in ("first", "second"):
        world.cache.upsert_podgroup(make_podgroup(group, 1))
    first = unseen(world, pod("m0", podgroup="first", gpus=8))
    node = world.filter("m0").passing[0]
    assert await world.bind("m0", node) == ""
    assert world.coordinator.phase_of("ml/first") == "Bound"
    later = pod("m0", podgroup="second", gpus=8)
    later["metadata"]["uid"] = first["metadata"]["uid"]
    world.pods["m0"] = later
    world.bind_in_cache("m0", node)  # the watch: bound, and in the other gang
    assert world.cache.pods["uid-m0"].gang_key == "ml/second"
    assert world.coordinator.phase_of("ml/first") != "Bound"
    assert world.coordinator.check_invariants() == []
