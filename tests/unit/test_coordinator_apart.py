"""Gangs whose members repel each other (required anti-affinity) are placed one per node at once."""

from __future__ import annotations

from typing import Any

from .fixtures import HOST, World, gang_pod, schedule


def one_per_host(pod: dict[str, Any], **term: Any) -> dict[str, Any]:
    """The member repels every pod with its own labels, per host (one worker per host)."""
    selector = {"matchLabels": dict(pod["metadata"]["labels"])}
    pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": HOST, **term}]}}
    return pod


def repelling_gang(world: World, count: int, min_count: int, **term: Any) -> list[str]:
    names = [f"w{i}" for i in range(count)]
    for name in names:
        world.add(one_per_host(gang_pod(name, gang="w", min_count=min_count, gpus=1), **term))
    return names


async def test_a_gang_of_eight_with_host_anti_affinity_is_reserved_on_eight_nodes_at_once() -> None:
    world = World(racks=2, nodes_per_rack=4)  # 16 nodes of 8 GPUs: plain packing would use one
    names = repelling_gang(world, 8, min_count=8)
    assert len(world.filter("w0").passing) == 1
    reservation = world.coordinator.reservation_of("ml/w")
    assert len(reservation) == 8 and len(set(reservation.values())) == 8
    nodes = await schedule(world, names)
    assert len(set(nodes.values())) == 8
    assert world.sample("quorum_placements_total", result="fit") == 1
    assert world.sample("quorum_reservation_releases_total", reason="replan") == 0


async def test_a_replacement_never_joins_a_host_where_a_member_runs() -> None:
    world = World()  # 8 nodes
    names = repelling_gang(world, 4, min_count=4)
    nodes = await schedule(world, names)
    world.cache.delete_pod(world.pods["w3"])  # a member is lost; its replacement comes
    world.add(one_per_host(gang_pod("w4", gang="w", min_count=4, gpus=1)))
    passing = world.filter("w4").passing
    assert len(passing) == 1
    assert passing[0] not in {nodes["w0"], nodes["w1"], nodes["w2"]}


async def test_more_members_than_nodes_is_refused_saying_members_are_kept_apart() -> None:
    world = World(racks=1, nodes_per_rack=2)  # 4 nodes
    repelling_gang(world, 5, min_count=5)
    assert world.filter("w0").passing == []
    reason = world.coordinator.reason_of("ml/w")
    assert "candidate nodes fit 4" in reason
    assert "at most one member per node: required anti-affinity between members" in reason


async def test_an_unmodelled_rule_between_members_is_refused_with_its_reason() -> None:
    world = World()
    repelling_gang(world, 2, min_count=2, matchLabelKeys=["pod-template-hash"])
    assert world.filter("w0").passing == []
    assert world.coordinator.reason_of("ml/w") == (
        "gang ml/w members' required anti-affinity with matchLabelKeys: not modelled by gang placement")
    assert world.coordinator.reservation_of("ml/w") == {}
