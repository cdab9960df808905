"""Whole-gang placement: topology rules, packing, shortfall messages, and a brute-force cross-check."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import pytest

from extender.topology.placement import (
    CandidateNode,
    Member,
    NoFit,
    Placement,
    fits,
    format_quantity,
    format_resources,
    place_gang,
)

LEVELS = ("block", "rack", "host")
BLOCK, RACK, HOST = 0, 1, 2
GPU = "nvidia.com/gpu"
GiB = 2**30


def node(block: str, rack: str, name: str, gpu: int = 8, cpu: int = 64_000, pods: int = 110) -> CandidateNode:
    """A node whose rack label is ``<block>-<rack>``; pass "" to leave a label off."""
    rack_label = f"{block}-{rack}" if rack else ""
    return CandidateNode(name, (block, rack_label, name), {"cpu": cpu, GPU: gpu, "memory": 512 * GiB}, pods)


def gang(n: int, cpu: int = 4000, gpu: int = 1) -> list[Member]:
    return [Member(f"placeholder-{i}", {"cpu": cpu, GPU: gpu}) for i in range(n)]


def cluster(blocks: int, racks: int, nodes: int, gpu: int = 8) -> list[CandidateNode]:
    return [
        node(f"b{b}", f"r{r}", f"b{b}-r{r}-n{h}", gpu=gpu)
        for b in range(blocks)
        for r in range(racks)
        for h in range(nodes)
    ]


def placed(result: Placement | NoFit) -> Placement:
    assert isinstance(result, Placement), result
    return result


def no_fit(result: Placement | NoFit) -> NoFit:
    assert isinstance(result, NoFit), result
    return result


def by_name(candidates: Sequence[CandidateNode]) -> dict[str, CandidateNode]:
    return {c.name: c for c in candidates}


def check_valid(
    result: Placement,
    candidates: Sequence[CandidateNode],
    members: Sequence[Member],
    required_level: int | None = None,
) -> None:
    """Every member exactly once, on a candidate, within per-node capacity, inside one required domain."""
    nodes = by_name(candidates)
    assert sorted(result.assignment) == sorted(m.key for m in members)
    assert set(result.assignment.values()) <= set(nodes)
    requests = {m.key: m.requests for m in members}
    per_node: dict[str, list[str]] = {}
    for key, name in result.assignment.items():
        per_node.setdefault(name, []).append(key)
    for name, keys in per_node.items():
        n = nodes[name]
        assert len(keys) <= n.pods_free, f"{name} over its pod slots"
        used: Counter[str] = Counter()
        for key in keys:
            used.update(requests[key])
        for resource, amount in used.items():
            assert amount <= n.free.get(resource, 0), f"{name} over {resource}"
    if required_level is not None:
        paths = {nodes[name].domains[: required_level + 1] for name in per_node}
        assert len(paths) == 1, paths
        (path,) = paths
        assert path[required_level] != ""
        assert result.domain == path


def racks_of(result: Placement, candidates: Sequence[CandidateNode]) -> set[tuple[str, ...]]:
    nodes = by_name(candidates)
    return {nodes[name].domains[:2] for name in result.assignment.values()}


def blocks_of(result: Placement, candidates: Sequence[CandidateNode]) -> set[str]:
    nodes = by_name(candidates)
    return {nodes[name].domains[0] for name in result.assignment.values()}


# --------------------------------------------------------------------------------------------------
# Helpers


def test_fits_checks_every_resource_and_a_pod_slot() -> None:
    free = {"cpu": 4000, GPU: 1}
    assert fits(free, 1, {"cpu": 4000, GPU: 1})
    assert not fits(free, 1, {"cpu": 4001})
    assert not fits(free, 1, {"memory": 1})  # missing resource counts as zero
    assert not fits(free, 0, {})  # zero requests still need a slot
    assert fits({}, 1, {"cpu": 0})


def test_format_resources_is_readable_and_ordered() -> None:
    assert format_resources({GPU: 1, "cpu": 4000}) == "{cpu: 4, nvidia.com/gpu: 1}"
    assert format_resources({"memory": 8 * GiB, "cpu": 500, "example.com/fpga": 2}) == (
        "{cpu: 500m, memory: 8Gi, example.com/fpga: 2}"
    )
    assert format_resources({"memory": 1536 * 2**20, GPU: 0}) == "{memory: 1536Mi}"
    assert format_resources({}) == "{}"
    assert format_quantity("memory", 1000) == "1000"
    assert format_quantity("cpu", 1500) == "1500m"
    assert format_quantity("ephemeral-storage", 2**40) == "1Ti"


# --------------------------------------------------------------------------------------------------
# Required level


def test_required_rack_picks_the_tightest_fitting_rack() -> None:
    candidates = [
        node("b0", "r0", "a1", gpu=8),
        node("b0", "r0", "a2", gpu=8),  # 16 free
        node("b0", "r1", "b1", gpu=4),
        node("b0", "r1", "b2", gpu=2),  # 6 free
        node("b1", "r2", "c1", gpu=3),
        node("b1", "r2", "c2", gpu=1),  # 4 free: exact fit for 4
    ]
    four = placed(place_gang(candidates, gang(4), LEVELS, RACK, None))
    check_valid(four, candidates, gang(4), RACK)
    assert four.domain == ("b1", "b1-r2")
    assert four.domains_used == 1

    five = placed(place_gang(candidates, gang(5), LEVELS, RACK, None))
    check_valid(five, candidates, gang(5), RACK)
    assert five.domain == ("b0", "b0-r1")  # r2 is too small, r1 is tighter than r0

    nine = placed(place_gang(candidates, gang(9), LEVELS, RACK, None))
    assert nine.domain == ("b0", "b0-r0")


def test_required_level_without_a_fitting_domain_reports_the_best_one() -> None:
    candidates = [
        node("b0", "r0", "a1", gpu=4),
        node("b0", "r1", "b1", gpu=3),
        node("b0", "r1", "b2", gpu=3),
        node("b1", "r2", "c1", gpu=3),
    ]
    result = no_fit(place_gang(candidates, gang(8), LEVELS, RACK, None))
    assert result.reason == "needs 8 × {cpu: 4, nvidia.com/gpu: 1}; best rack fits 6"
    # the whole block b0 holds 10, so a block requirement fits
    block = placed(place_gang(candidates, gang(8), LEVELS, BLOCK, None))
    check_valid(block, candidates, gang(8), BLOCK)
    assert block.domain == ("b0",)


def test_nodes_without_the_label_never_satisfy_a_requirement() -> None:
    candidates = [
        node("b0", "", "unlabelled", gpu=8),
        node("b0", "r0", "labelled", gpu=2),
    ]
    short = no_fit(place_gang(candidates, gang(4), LEVELS, RACK, None))
    assert short.reason.endswith("; best rack fits 2")
    ok = placed(place_gang(candidates, gang(2), LEVELS, RACK, None))
    assert set(ok.assignment.values()) == {"labelled"}
    # the block label is present on both, so a block requirement may use the unlabelled rack
    block = placed(place_gang(candidates, gang(10), LEVELS, BLOCK, None))
    check_valid(block, candidates, gang(10), BLOCK)

    none_labelled = [node("b0", "", "x", gpu=8)]
    reason = no_fit(place_gang(none_labelled, gang(1), LEVELS, RACK, None)).reason
    assert (
        reason
        == "needs 1 × {cpu: 4, nvidia.com/gpu: 1}; best rack fits 0 (no candidate node has a rack label)"
    )


def test_packs_onto_the_fewest_nodes_inside_the_domain() -> None:
    candidates = [
        node("b0", "r0", "n0", gpu=2),
        node("b0", "r0", "n1", gpu=2),
        node("b0", "r0", "n2", gpu=3),
        node("b0", "r0", "n3", gpu=8),
        node("b0", "r0", "n4", gpu=2),
    ]
    eight = placed(place_gang(candidates, gang(8), LEVELS, RACK, None))
    assert set(eight.assignment.values()) == {"n3"}
    # 10 needs two nodes: the big one, then the tightest node that takes the remaining 2 (n0 by name)
    ten = placed(place_gang(candidates, gang(10), LEVELS, RACK, None))
    check_valid(ten, candidates, gang(10), RACK)
    assert Counter(ten.assignment.values()) == {"n3": 8, "n0": 2}
    # a gang that fits one small node goes to the tightest one, not the empty 8-GPU node
    three = placed(place_gang(candidates, gang(3), LEVELS, RACK, None))
    assert set(three.assignment.values()) == {"n2"}


def test_largest_nodes_first_then_best_fit() -> None:
    candidates = [
        node("b0", "r0", "n0", gpu=2),
        node("b0", "r0", "n1", gpu=2),
        node("b0", "r0", "n2", gpu=5),
        node("b0", "r0", "n3", gpu=5),
        node("b0", "r0", "n4", gpu=8),
    ]
    result = placed(place_gang(candidates, gang(13), LEVELS, RACK, None))
    assert Counter(result.assignment.values()) == {"n4": 8, "n2": 5}


def test_equally_tight_domains_prefer_fewer_nodes() -> None:
    candidates = [
        node("b0", "ra", "a0", gpu=4),
        node("b0", "ra", "a1", gpu=4),
        node("b0", "rb", "b0", gpu=8),
        node("b0", "rb", "b1", gpu=0),
    ]
    result = placed(place_gang(candidates, gang(8), LEVELS, RACK, None))
    assert result.domain == ("b0", "b0-rb")  # same free GPUs as b0-ra, but one node instead of two
    assert set(result.assignment.values()) == {"b0"}


def test_required_and_preferred_combined() -> None:
    candidates = cluster(2, 2, 2)
    # b1 is tighter: one of its racks is half used
    candidates = [node("b1", "r0", c.name, gpu=4) if c.domains[1] == "b1-r0" else c for c in candidates]
    result = placed(place_gang(candidates, gang(6), LEVELS, BLOCK, RACK))
    check_valid(result, candidates, gang(6), BLOCK)
    assert result.domain == ("b1",)
    assert racks_of(result, candidates) == {("b1", "b1-r0")}  # one rack inside the required block


# --------------------------------------------------------------------------------------------------
# Preferred level / unconstrained


def test_preferred_rack_larger_than_a_rack_uses_fewest_racks_in_one_block() -> None:
    candidates = cluster(2, 4, 4)  # 32 GPUs per rack, 128 per block
    members = gang(40)
    result = placed(place_gang(candidates, members, LEVELS, None, RACK))
    check_valid(result, candidates, members)
    assert len(blocks_of(result, candidates)) == 1
    assert len(racks_of(result, candidates)) == 2
    assert result.domains_used == 2
    assert len(set(result.assignment.values())) == 5  # 4 full nodes + 1
    assert result.domain == ("b0",)  # the preference (a rack) could not be met; the block is reported


def test_preferred_rack_spreads_inside_the_tighter_block() -> None:
    candidates = cluster(2, 4, 4)
    candidates = [
        node(c.domains[0], c.domains[1].split("-")[1], c.name, gpu=4) if c.domains[0] == "b1" else c
        for c in candidates
    ]  # b1: 16 GPUs per rack, 64 in all
    result = placed(place_gang(candidates, gang(40), LEVELS, None, RACK))
    check_valid(result, candidates, gang(40))
    assert blocks_of(result, candidates) == {"b1"}
    assert len(racks_of(result, candidates)) == 3  # 16 + 16 + 8


def test_preferred_takes_the_lowest_single_domain_even_in_a_looser_block() -> None:
    candidates = [
        # b0 is the tighter block overall but no rack of it holds 6
        node("b0", "r0", "a1", gpu=3),
        node("b0", "r1", "a2", gpu=3),
        # b1 has more free in total, and one rack that holds 6 on its own
        node("b1", "r0", "b1", gpu=6),
        node("b1", "r1", "b2", gpu=8),
    ]
    result = placed(place_gang(candidates, gang(6), LEVELS, None, RACK))
    assert set(result.assignment.values()) == {"b1"}
    assert result.domain == ("b1", "b1-r0")
    # a block preference is satisfied by that rack too; the block path is reported
    assert placed(place_gang(candidates, gang(6), LEVELS, None, BLOCK)).domain == ("b1",)


def test_unconstrained_spreads_over_everything_and_reports_no_domain() -> None:
    candidates = cluster(2, 2, 1, gpu=2)  # 8 GPUs, 2 per node, on 4 racks in 2 blocks
    result = placed(place_gang(candidates, gang(8), LEVELS, None, None))
    check_valid(result, candidates, gang(8))
    assert result.domain == ()
    assert result.domains_used == 4
    short = no_fit(place_gang(candidates, gang(9), LEVELS, None, None))
    assert short.reason == "needs 9 × {cpu: 4, nvidia.com/gpu: 1}; candidate nodes fit 8"


def test_unlabelled_nodes_are_usable_when_nothing_is_required() -> None:
    candidates = [node("", "", "loose", gpu=8), node("b0", "r0", "n0", gpu=2)]
    result = placed(place_gang(candidates, gang(10), LEVELS, None, RACK))
    check_valid(result, candidates, gang(10))
    assert result.domain == ()


# --------------------------------------------------------------------------------------------------
# Per-node capacity (fragmentation), heterogeneous gangs, pod slots


def test_fragmented_gpus_do_not_count_as_a_rack_with_eight() -> None:
    # 8 free GPUs in the cluster, one per node, two nodes per rack
    candidates = cluster(2, 2, 2, gpu=1)
    assert sum(c.free[GPU] for c in candidates) == 8
    rack = no_fit(place_gang(candidates, gang(8), LEVELS, RACK, None))
    assert rack.reason == "needs 8 × {cpu: 4, nvidia.com/gpu: 1}; best rack fits 2"
    # one pod wanting 8 GPUs fits nowhere, although the cluster has 8 free
    whole = no_fit(place_gang(candidates, gang(1, gpu=8), LEVELS, None, None))
    assert whole.reason == "needs 1 × {cpu: 4, nvidia.com/gpu: 8}; candidate nodes fit 0"
    # 2-GPU members on 1-GPU nodes: rack totals of 2 are not enough
    pairs = no_fit(place_gang(candidates, gang(1, gpu=2), LEVELS, RACK, None))
    assert pairs.reason.endswith("best rack fits 0")


def test_heterogeneous_gang_packs_per_node() -> None:
    leader = Member("leader", {"cpu": 8000})
    workers = [Member(f"w{i}", {"cpu": 4000, GPU: 2}) for i in range(4)]
    members = [leader, *workers]
    candidates = [
        node("b0", "r0", "gpu-node", gpu=8, cpu=16_000),  # room for the 4 workers, not the leader too
        node("b0", "r0", "cpu-node", gpu=0, cpu=8000),
        node("b0", "r1", "big", gpu=8, cpu=20_000),  # 20 cpu < 24 needed
    ]
    result = placed(place_gang(candidates, members, LEVELS, RACK, None))
    check_valid(result, candidates, members, RACK)
    assert result.assignment["leader"] == "cpu-node"
    assert {result.assignment[w.key] for w in workers} == {"gpu-node"}

    short = no_fit(place_gang(candidates[2:], members, LEVELS, RACK, None))
    assert short.reason == "needs 5 pods (total {cpu: 24, nvidia.com/gpu: 8}); best rack fits 4"

    too_big = [*members, Member("huge", {"cpu": 1000, GPU: 9})]
    reason = no_fit(place_gang(candidates, too_big, LEVELS, None, None)).reason
    assert reason == (
        "needs 6 pods (total {cpu: 25, nvidia.com/gpu: 17}); no candidate node fits one pod of "
        "{cpu: 1, nvidia.com/gpu: 9}"
    )


def test_heterogeneous_fit_that_node_by_node_filling_misses() -> None:
    # Filling the first node greedily puts the 1-cpu member where only the 2-cpu member can go.
    candidates = [
        CandidateNode("a", ("b0", "b0-r0", "a"), {"cpu": 4000, GPU: 1}, 1),
        CandidateNode("b", ("b1", "b1-r0", "b"), {"cpu": 1000, GPU: 1}, 2),
        CandidateNode("c", ("b1", "b1-r1", "c"), {"cpu": 2000, GPU: 4}, 3),
    ]
    members = [
        Member("m0", {"cpu": 2000, GPU: 2}),
        Member("m1", {"cpu": 1000, GPU: 1}),
        Member("m2", {"cpu": 2000}),
    ]
    result = placed(place_gang(candidates, members, LEVELS, None, None))
    check_valid(result, candidates, members)
    assert result.assignment == {"m0": "c", "m1": "b", "m2": "a"}


def test_pod_slots_limit_members_with_and_without_requests() -> None:
    candidates = [
        node("b0", "r0", "n0", pods=2),
        node("b0", "r0", "n1", pods=1),
        node("b0", "r1", "n2", pods=0),
    ]
    empty = [Member(f"p{i}", {}) for i in range(3)]
    result = placed(place_gang(candidates, empty, LEVELS, RACK, None))
    check_valid(result, candidates, empty, RACK)
    assert Counter(result.assignment.values()) == {"n0": 2, "n1": 1}
    four = [*empty, Member("p3", {})]
    assert no_fit(place_gang(candidates, four, LEVELS, RACK, None)).reason == "needs 4 × {}; best rack fits 3"
    # slots bound gangs with requests too: 8 GPUs free but 2 slots
    assert no_fit(place_gang(candidates[:1], gang(3), LEVELS, None, None)).reason.endswith(
        "candidate nodes fit 2"
    )


def test_empty_inputs() -> None:
    reason = no_fit(place_gang([], gang(2), LEVELS, RACK, None)).reason
    assert reason == "no candidate nodes passed the scheduler's filters"
    assert place_gang(cluster(1, 1, 1), [], LEVELS, None, None) == Placement({}, (), 0)


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        place_gang(cluster(1, 1, 1), gang(1), LEVELS, 3, None)
    with pytest.raises(ValueError):
        place_gang([CandidateNode("x", ("b0",), {}, 1)], gang(1), LEVELS, None, None)
    with pytest.raises(ValueError):
        place_gang(cluster(1, 1, 1), [Member("a", {}), Member("a", {})], LEVELS, None, None)


def test_deterministic_and_independent_of_candidate_order() -> None:
    candidates = cluster(3, 3, 3)
    rng = random.Random(7)
    candidates = [
        node(c.domains[0], c.domains[1].split("-")[1], c.name, gpu=rng.randint(0, 8)) for c in candidates
    ]
    for required, preferred, size in ((RACK, None, 9), (None, RACK, 30), (BLOCK, RACK, 20), (None, None, 50)):
        first = place_gang(candidates, gang(size), LEVELS, required, preferred)
        assert place_gang(candidates, gang(size), LEVELS, required, preferred) == first
        shuffled = list(candidates)
        rng.shuffle(shuffled)
        assert place_gang(shuffled, gang(size), LEVELS, required, preferred) == first


def test_require_block_prefer_rack_takes_the_block_where_a_rack_fits() -> None:
    """Kueue's "required block, preferred rack": block b0 is the tighter block but has no rack with
    room for the gang; b1 has one. The gang goes whole into that rack, not over two racks of b0."""
    nodes = [CandidateNode(f"{b}-r{r}-n{n}", (b, f"{b}-r{r}", f"{b}-r{r}-n{n}"),
                           {"gpu": 8 if n < free else 0}, 110)
             for b, frees in (("b0", (2, 2, 2, 2)), ("b1", (4, 2, 2, 2)))
             for r, free in enumerate(frees) for n in range(4)]
    members = [Member(f"m{i}", {"gpu": 8}) for i in range(4)]
    result = place_gang(nodes, members, LEVELS, 0, 1)
    assert isinstance(result, Placement)
    assert {node.rsplit("-", 1)[0] for node in result.assignment.values()} == {"b1-r0"}
    assert result.domain == ("b1",)
    # With the requirement alone the tightest block wins, spread over two of its racks.
    alone = place_gang(nodes, members, LEVELS, 0, None)
    assert isinstance(alone, Placement)
    assert {node.rsplit("-", 1)[0] for node in alone.assignment.values()} == {"b0-r0", "b0-r1"}
