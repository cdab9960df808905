"""The ledger's placement candidates and its in-flight index by gang.

A placement reads every candidate node, so the ledger keeps the candidate of a node with nothing
reserved or in flight between placements. These tests check that what is kept never outlives the
capacity it describes: a bound pod, a reservation, a bind in flight, a relabelled node.
"""

from __future__ import annotations

from extender.gang.ledger import CapacityLedger

from .fixtures import World
from .payloads import make_node, make_pod

GPU = "nvidia.com/gpu"
NODE = "b0-r0-n0"


def gpus(ledger: CapacityLedger, world: World, gang: str) -> int:
    found = ledger.candidate(world.cache.nodes[NODE], gang)
    assert found is not None
    return found.free.get(GPU, 0)


def test_a_kept_candidate_follows_bound_pods_reservations_and_binds_in_flight() -> None:
    world = World()
    ledger = CapacityLedger(world.cache)
    first = ledger.candidate(world.cache.nodes[NODE], "ml/a")
    assert first is not None and first.free[GPU] == 8
    assert ledger.candidate(world.cache.nodes[NODE], "ml/b") is first  # nothing changed: kept

    web = make_pod("web", "uid-web", node=NODE, phase="Running", gpus=2)
    world.cache.upsert_pod(web)
    assert gpus(ledger, world, "ml/a") == 6
    cpu = ledger.candidate(world.cache.nodes[NODE], "ml/a")
    resized = make_pod("web", "uid-web", node=NODE, phase="Running", gpus=2, cpu="2")  # resized in place
    world.cache.upsert_pod(resized)
    after = ledger.candidate(world.cache.nodes[NODE], "ml/a")
    assert cpu is not None and after is not None
    assert after.free["cpu"] - cpu.free["cpu"] == 6000  # same pods, less requested: more free

    ledger.reserve("ml/b", "uid-b0", NODE, {GPU: 4})
    assert gpus(ledger, world, "ml/a") == 2  # another gang's reservation is not free
    assert gpus(ledger, world, "ml/b") == 6  # its own is
    ledger.unreserve("uid-b0")
    assert gpus(ledger, world, "ml/a") == 6

    ledger.mark_inflight("uid-c0", NODE, {GPU: 1}, gang="ml/c")
    assert gpus(ledger, world, "ml/a") == 5
    ledger.clear_inflight("uid-c0")
    assert gpus(ledger, world, "ml/a") == 6

    world.cache.delete_pod(resized)
    assert gpus(ledger, world, "ml/a") == 8
    assert ledger.check() == []


def test_a_relabelled_node_is_a_new_candidate() -> None:
    world = World()
    ledger = CapacityLedger(world.cache)
    before = ledger.candidate(world.cache.nodes[NODE], "ml/a")
    world.cache.upsert_node(make_node(NODE, "b1", "b1-r9"))
    after = ledger.candidate(world.cache.nodes[NODE], "ml/a")
    assert before is not None and after is not None
    assert after.domains != before.domains and "b1-r9" in after.domains


def test_in_flight_binds_are_counted_by_gang_and_the_index_is_checked() -> None:
    world = World()
    ledger = CapacityLedger(world.cache)
    ledger.mark_inflight("uid-a0", NODE, {GPU: 1}, gang="ml/a")
    ledger.mark_inflight("uid-a1", "b0-r0-n1", {GPU: 1}, gang="ml/a")
    ledger.mark_inflight("uid-x", "b0-r1-n0", {GPU: 1})
    assert ledger.inflight_of("ml/a", []) == 2
    assert ledger.inflight_of("ml/a", ["uid-x"]) == 3  # a member named by the caller counts too
    assert ledger.inflight_of("ml/a", [], exclude=["uid-a1"]) == 1
    ledger.clear_inflight("uid-a0")
    assert ledger.inflight_of("ml/a", []) == 1
    assert ledger.check() == []
    ledger.clear_inflight("uid-a1")
    assert ledger.inflight_of("ml/a", []) == 0
    assert ledger.check() == []
    ledger.mark_inflight("uid-b0", NODE, {GPU: 1}, gang="ml/b")
    ledger._inflight_by_gang["ml/b"].add("uid-ghost")  # the index says more than the binds
    assert any("by gang" in problem for problem in ledger.check())


def test_the_binds_in_flight_are_a_read_only_view_that_follows_the_marks() -> None:
    """A placement asks for the binds in flight for every gang it repairs; the ledger hands out a
    view of its own map rather than a copy, so the view must follow later marks and refuse writes."""
    world = World()
    ledger = CapacityLedger(world.cache)
    view = ledger.inflight()
    assert dict(view) == {}
    ledger.mark_inflight("uid-c0", NODE, {GPU: 1}, gang="ml/c")
    ledger.mark_inflight("uid-c1", "b0-r0-n1", {GPU: 1}, gang="ml/c")
    assert dict(view) == {"uid-c0": NODE, "uid-c1": "b0-r0-n1"}  # the view taken before sees both
    assert ledger.inflight_node("uid-c1") == "b0-r0-n1"
    ledger.clear_inflight("uid-c0")
    assert dict(view) == {"uid-c1": "b0-r0-n1"}
    try:
        view["uid-x"] = NODE  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("the in-flight view accepted a write")
    assert dict(ledger.inflight()) == {"uid-c1": "b0-r0-n1"}
    assert ledger.check() == []
