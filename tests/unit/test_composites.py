"""CompositePodGroups (cluster/composites.py, topology/composite.py): a gang of PodGroups is placed
and bound whole, inside the composite's domain, each PodGroup inside its own, whichever of pods,
PodGroups and composites the watch delivers first."""

from __future__ import annotations

import asyncio
import io

from extender.adapters.status import render
from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import GANG_CHANGED
from extender.cluster.object_sources import GANG_OBJECT_KINDS
from extender.gang.state import Phase
from extender.topology.composite import Part, place_parts
from extender.topology.model import CandidateNode, Member, NoFit, Placement

from .fixtures import BLOCK, LEVEL_LABELS, RACK, World, gang_pod, make_podgroup, schedule
from .payloads import make_composite

COMPOSITES = next(k for k in GANG_OBJECT_KINDS if k.name == "compositepodgroups").source(
    "scheduling.k8s.io/v1alpha3")
ROOT = "ml/composite:train"


def members(cache: ClusterCache, key: str) -> list[str]:
    return sorted(m.name for m in cache.members(key))


def children(cache: ClusterCache, sizes: dict[str, int], topology: str | None = RACK) -> None:
    for name, size in sizes.items():
        cache.upsert_podgroup(make_podgroup(name, size, topology_key=topology, parent="train"))


def test_the_pods_of_every_podgroup_under_a_composite_are_one_gang_in_any_order() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    for name in ("a0", "a1"):
        cache.upsert_pod(gang_pod(name, podgroup="a"))
    assert members(cache, "ml/a") == ["a0", "a1"]  # no PodGroup yet: its own name
    children(cache, {"a": 2})
    assert members(cache, ROOT) == ["a0", "a1"] and members(cache, "ml/a") == []
    assert cache.gang_spec(ROOT) is None  # the composite itself not seen yet: the gang waits
    cache.upsert_gang_object(COMPOSITES, make_composite("train", 2, topology_key=BLOCK))
    children(cache, {"b": 3})
    cache.upsert_pod(gang_pod("b0", podgroup="b"))
    assert members(cache, ROOT) == ["a0", "a1", "b0"]
    spec = cache.gang_spec(ROOT)
    assert spec is not None and spec.is_gang and spec.min_count == 5 and spec.min_parts == 2
    assert [(p.key, p.min_count, p.required_topology) for p in spec.parts] == \
        [("ml/a", 2, RACK), ("ml/b", 3, RACK)]
    assert spec.required_topology == BLOCK and spec.home is not None and spec.home.kind == "CompositePodGroup"
    assert {cache.pods[f"uid-{n}"].part for n in ("a0", "b0")} == {"ml/a", "ml/b"}


def test_a_basic_composite_leaves_its_podgroups_gangs_of_their_own_and_a_gang_one_above_takes_them() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_gang_object(COMPOSITES, make_composite("train", None))
    children(cache, {"a": 1})
    cache.upsert_pod(gang_pod("a0", podgroup="a"))
    assert members(cache, "ml/a") == ["a0"]
    basic = cache.gang_spec("ml/composite:train")
    assert basic is not None and not basic.is_gang
    cache.upsert_gang_object(COMPOSITES, make_composite("train", None, parent="top"))
    assert members(cache, "ml/composite:top") == ["a0"]  # a parent not seen yet: wait for it
    cache.upsert_gang_object(COMPOSITES, make_composite("top", 1))
    assert members(cache, "ml/composite:top") == ["a0"]
    spec = cache.gang_spec("ml/composite:top")
    assert spec is not None and [p.key for p in spec.parts] == ["ml/a"]
    cache.delete_gang_object(COMPOSITES, make_composite("train", None, parent="top"))
    assert members(cache, "ml/composite:train") == ["a0"]  # its PodGroup still names it


def test_a_podgroup_changing_under_a_composite_changes_the_composites_spec() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.upsert_gang_object(COMPOSITES, make_composite("train", 1))
    children(cache, {"a": 2})
    seen = []
    cache.listeners.append(lambda event: seen.append((event.kind, event.key)))
    cache.upsert_podgroup(make_podgroup("a", 3, topology_key=RACK, parent="train"))
    assert (GANG_CHANGED, ROOT) in seen
    spec = cache.gang_spec(ROOT)
    assert spec is not None and spec.min_count == 3
    cache.delete_podgroup(make_podgroup("a", 3, parent="train"))
    spec = cache.gang_spec(ROOT)
    assert spec is not None and spec.parts == () and spec.min_count == 1


def composite_world(sizes: dict[str, int], pods: dict[str, int] | None = None, per_rack: int = 2) -> World:
    """Two blocks of two racks of ``per_rack`` 8-GPU nodes; composite ``train`` in one block, each
    PodGroup in one rack; ``pods`` members per PodGroup (its size by default), one whole node each."""
    world = World(nodes_per_rack=per_rack)
    world.cache.upsert_gang_object(COMPOSITES, make_composite("train", len(sizes), topology_key=BLOCK))
    children(world.cache, sizes)
    for group, count in (pods or sizes).items():
        for i in range(count):
            world.add(gang_pod(f"{group}{i}", podgroup=group, gpus=8))
    return world


async def test_a_composite_binds_whole_inside_one_block_each_podgroup_in_one_rack() -> None:
    world = composite_world({"a": 2, "b": 2})
    names = ["a0", "a1", "b0", "b1"]
    for name in names:
        assert world.filter(name).passing, world.coordinator.reason_of(ROOT)
    nodes = {name: world.coordinator.reservation_of(ROOT)[f"uid-{name}"] for name in names}
    answers = await asyncio.gather(*(world.bind(n, nodes[n]) for n in names))
    assert answers == [""] * 4
    assert sorted(world.actions.bound) == sorted(nodes.items())
    assert len({world.cache.nodes[n].domains[0] for n in nodes.values()}) == 1  # one block
    assert world.rack_of(nodes["a0"]) == world.rack_of(nodes["a1"]) != world.rack_of(nodes["b0"])
    assert world.rack_of(nodes["b0"]) == world.rack_of(nodes["b1"])


async def test_a_bound_composite_shows_its_podgroups_in_debug_and_status_and_on_each_podgroup() -> None:
    world = composite_world({"a": 2, "b": 1})
    await schedule(world, ["a0", "a1", "b0"])
    await asyncio.sleep(0)
    gang = next(g for g in world.coordinator.debug_document()["gangs"] if g["gang"] == ROOT)
    assert gang["phase"] == "Bound" and gang["minCount"] == 3
    assert [(p["podGroup"], p["minCount"], p["members"], p["bound"]) for p in gang["parts"]] == \
        [("ml/a", 2, 2, 2), ("ml/b", 1, 1, 1)]
    out = io.StringIO()
    render({}, [gang], out)
    assert "  - ml/a" in out.getvalue() and "2/2 min 2" in out.getvalue(), out.getvalue()
    for home in ("ml/train", "ml/a", "ml/b"):  # the composite and each of its PodGroups
        scheduled = {c.type: c.status for c in world.actions.conditions[home]}
        assert scheduled.get("PodGroupInitiallyScheduled") is True, (home, world.actions.conditions)


async def test_nothing_of_a_composite_is_reserved_while_one_podgroup_cannot_fit_and_says_which() -> None:
    world = composite_world({"a": 1, "b": 3})  # a block holds all four, but no rack holds b's three
    decision = world.filter("a0")
    assert not decision.passing
    assert world.coordinator.reservation_of(ROOT) == {}
    assert "PodGroup b" in world.coordinator.reason_of(ROOT), world.coordinator.reason_of(ROOT)


async def test_extra_members_of_one_podgroup_do_not_stand_in_for_another_at_the_quorum_gate() -> None:
    world = composite_world({"a": 2, "b": 2}, pods={"a": 3, "b": 1})
    decision = world.filter("a0")
    assert not decision.passing
    assert "b 1/2" in decision.reason, decision.reason


async def test_binds_of_one_podgroups_extras_do_not_release_the_composite_before_the_other_podgroup() -> None:
    world = composite_world({"a": 1, "b": 2}, pods={"a": 2, "b": 2})
    for name in ("a0", "a1", "b0", "b1"):
        assert world.filter(name).passing, world.coordinator.reason_of(ROOT)
    reserved = world.coordinator.reservation_of(ROOT)
    early = [asyncio.ensure_future(world.bind(n, reserved[f"uid-{n}"])) for n in ("a0", "a1", "b0")]
    await asyncio.sleep(0.01)
    assert world.actions.bound == []  # three held, minCount 3 in total, but b has one of its two
    assert not any(task.done() for task in early)
    answers = await asyncio.gather(world.bind("b1", reserved["uid-b1"]), *early)
    assert answers == [""] * 4 and len(world.actions.bound) == 4


# --- the pure search ------------------------------------------------------------------------------
LEVELS = ("block", "rack", "host")


def node(name: str, block: str, rack: str, gpus: int = 8) -> CandidateNode:
    return CandidateNode(name, (block, rack, name), {"gpu": gpus}, 110)


def part(name: str, count: int, gpus: int = 8, level: int | None = 1) -> Part:
    return Part(name, [Member(f"{name}{i}", {"gpu": gpus}) for i in range(count)], level)


def test_place_parts_tries_each_block_until_every_part_fits_in_a_rack_of_its_own() -> None:
    # b0 has the most room in total, but in four racks of one node: no part of two fits a rack there.
    nodes = [node(f"b0-r{r}", "b0", f"b0-r{r}") for r in range(4)] + \
            [node(f"b1-r{r}-n{n}", "b1", f"b1-r{r}") for r in range(2) for n in range(2)]
    result = place_parts(nodes, [part("a", 2), part("b", 2)], LEVELS, 0, None)
    assert isinstance(result, Placement), result
    assert result.domain == ("b1",)
    rack_of = {n.name: n.domains[1] for n in nodes}
    racks = {key: rack_of[where] for key, where in result.assignment.items()}
    assert racks["a0"] == racks["a1"] != racks["b0"] == racks["b1"]


def test_place_parts_says_which_podgroup_does_not_fit() -> None:
    nodes = [node(f"b0-r{r}-n{n}", "b0", f"b0-r{r}") for r in range(2) for n in range(2)]
    result = place_parts(nodes, [part("a", 1), part("b", 3)], LEVELS, 0, None)
    assert isinstance(result, NoFit) and "PodGroup b" in result.reason, result


def test_place_parts_without_a_composite_domain_places_parts_anywhere_apart_from_each_other() -> None:
    nodes = [node(f"b{b}-r0-n{n}", f"b{b}", f"b{b}-r0") for b in range(2) for n in range(2)]
    result = place_parts(nodes, [part("a", 2), part("b", 2)], LEVELS, None, None)
    assert isinstance(result, Placement), result
    assert len(set(result.assignment.values())) == 4


async def test_a_replacement_for_a_lost_member_joins_its_own_podgroups_rack() -> None:
    """Racks of four: a (3) and b (3) run in the two racks of one block, one node left in each. a
    loses a member: its replacement goes back to a's rack, though b's has a node free too."""
    world = composite_world({"a": 3, "b": 3}, per_rack=4)
    await schedule(world, ["a0", "a1", "a2", "b0", "b1", "b2"])
    rack_a, rack_b = (world.rack_of(world.cache.pods[f"uid-{n}"].node_name) for n in ("a0", "b0"))
    assert rack_a != rack_b
    world.cache.delete_pod(world.pods.pop("a2"))
    world.add(gang_pod("a3", podgroup="a", gpus=8))
    passing = world.filter("a3").passing
    assert passing and {world.rack_of(n) for n in passing} == {rack_a}, (passing, rack_a)


async def test_a_running_composite_whose_podgroup_falls_below_its_min_count_is_recovering() -> None:
    """a runs one member over its minCount; b loses one of its two: three of three members still
    run, but b is short, which a's extra does not make up for."""
    world = composite_world({"a": 1, "b": 2}, pods={"a": 2, "b": 2})
    await schedule(world, ["a0", "a1", "b0", "b1"])
    assert world.coordinator.registry.gangs[ROOT].phase == Phase.BOUND
    world.cache.delete_pod(world.pods.pop("b1"))
    await asyncio.sleep(0)
    assert world.coordinator.registry.gangs[ROOT].phase == Phase.RECOVERING
    assert world.coordinator.registry.running_count(ROOT) == 2


async def test_a_composite_missing_a_podgroup_is_not_running_at_quorum_whatever_runs_already() -> None:
    """minGroupCount 2 and one PodGroup so far: a member someone else bound does not make the next
    one an extra that may bind on its own (found by the core stateful machine)."""
    world = World()
    world.cache.upsert_gang_object(COMPOSITES, make_composite("train", 2))
    children(world.cache, {"a": 1}, topology=None)
    world.add(gang_pod("a0", podgroup="a", node_name="b0-r0-n0"))
    world.add(gang_pod("a1", podgroup="a"))
    decision = world.filter("a1")
    assert not decision.passing, world.coordinator.reason_of(ROOT)
    assert "1/2 PodGroups exist" in decision.reason, decision.reason
    spec = world.cache.gang_spec(ROOT)
    assert spec is not None and spec.min_count == 2  # a PodGroup not seen yet needs one member
