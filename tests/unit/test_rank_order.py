"""Ranks close together: consecutive ranks of a gang share a node, then the next node of the rack."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from itertools import pairwise

import pytest

from extender.cluster.records import pod_rank
from extender.topology.placement import CandidateNode, Member, Placement, place_gang
from extender.topology.ranks import rank_assignment
from extender.topology.slices import place_sliced

from .fixtures import World, gang_pod
from .test_placement import GPU, LEVELS, RACK, check_valid, cluster, node, placed

INDEX = "batch.kubernetes.io/job-completion-index"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"


def ranked(n: int, gpu: int = 1, seed: int = 0) -> list[Member]:
    """``n`` members of rank (0, i), given in a shuffled order under keys that hide the rank."""
    members = [Member(f"pod-{i:02d}", {"cpu": 1000, GPU: gpu}, (0, i)) for i in range(n)]
    random.Random(seed).shuffle(members)
    return members


def runs(result: Placement, members: Sequence[Member]) -> list[str]:
    """The node of each member, in rank order."""
    return [result.assignment[m.key] for m in sorted(members, key=lambda m: m.rank)]


def breaks(nodes: Sequence[str]) -> int:
    """Consecutive ranks on different nodes."""
    return sum(1 for a, b in pairwise(nodes) if a != b)


def position(candidates: Sequence[CandidateNode]) -> dict[str, tuple[tuple[str, ...], str]]:
    return {c.name: (c.domains, c.name) for c in candidates}


# --------------------------------------------------------------------------------------------------
# The rank of a pod


@pytest.mark.parametrize(("meta", "rank"), [
    ({"labels": {INDEX: "3"}}, (0, 3)),
    ({"annotations": {INDEX: "12"}}, (0, 12)),  # Job controllers before the index label
    ({"labels": {INDEX: "1", JOB_INDEX: "2"}}, (2, 1)),
    ({"labels": {INDEX: "1", JOB_INDEX: "2", GLOBAL_INDEX: "5"}}, (5, 1)),  # unique across the JobSet
    ({"labels": {JOB_INDEX: "2"}, "annotations": {INDEX: "4"}}, (2, 4)),
    ({"labels": {JOB_INDEX: "2"}}, ()),  # no completion index: no rank
    ({}, ()),
    ({"labels": {INDEX: "-1"}}, ()),
    ({"labels": {INDEX: "\u0663"}}, ()),  # a non-ASCII digit
    ({"labels": {INDEX: "9" * 40}}, ()),
    ({"labels": {INDEX: 3}}, ()),
    ({"labels": ["x"], "annotations": {INDEX: "7"}}, (0, 7)),
    ({"labels": {INDEX: "2", JOB_INDEX: "x"}}, (0, 2)),
])
def test_pod_rank_reads_the_job_and_completion_indexes(meta: dict[str, object],
                                                       rank: tuple[int, ...]) -> None:
    assert pod_rank(meta) == rank


def test_ranks_order_by_job_then_completion_index() -> None:
    ranks = [pod_rank({"labels": {INDEX: str(i), JOB_INDEX: str(j)}}) for j in (1, 0) for i in (1, 0)]
    assert sorted(ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]


# --------------------------------------------------------------------------------------------------
# The pure placement


def test_eight_ranks_two_per_node_fill_the_rack_node_by_node() -> None:
    nodes = cluster(1, 2, 4, gpu=2)
    random.Random(3).shuffle(nodes)  # the snapshot's order is not the rack's
    members = ranked(8)
    result = placed(place_gang(nodes, members, LEVELS, RACK, None))
    check_valid(result, nodes, members, RACK)
    on = runs(result, members)
    assert [on[i] == on[i + 1] for i in range(0, 8, 2)] == [True] * 4, on  # (0,1), (2,3), ... share
    rack = on[0].rsplit("-", 1)[0]
    assert on == [f"{rack}-n{i // 2}" for i in range(8)], on  # and go through the rack's nodes in order


def test_nodes_of_one_rack_are_adjacent_across_racks() -> None:
    nodes = cluster(2, 2, 2, gpu=4)  # two members a node, four a rack, eight a block
    random.Random(1).shuffle(nodes)
    members = ranked(12, gpu=2)  # a block and a half
    result = placed(place_gang(nodes, members, LEVELS, None, None))
    on = runs(result, members)
    racks = [name.rsplit("-", 1)[0] for name in on]
    blocks = [name.split("-", 1)[0] for name in on]
    assert breaks(blocks) == 1 and breaks(racks) == 2, on  # each rack, then each block, one run of ranks
    assert breaks(on) == len(set(on)) - 1 == 5, on


def test_members_without_a_rank_keep_the_slots_after_the_ranked_ones() -> None:
    nodes = cluster(1, 1, 3, gpu=2)
    members = [*ranked(4), Member("zz-unranked", {"cpu": 1000, GPU: 1})]
    result = placed(place_gang(nodes, members, LEVELS, None, None))
    assert runs(result, members[:4]) == ["b0-r0-n0", "b0-r0-n0", "b0-r0-n1", "b0-r0-n1"]
    assert result.assignment["zz-unranked"] == "b0-r0-n2"


def test_a_gang_without_ranks_is_placed_as_before() -> None:
    nodes = cluster(1, 2, 4, gpu=2)
    plain = [Member(m.key, m.requests) for m in ranked(8)]
    assignment = placed(place_gang(nodes, plain, LEVELS, None, None)).assignment
    assert rank_assignment(plain, assignment, {n.name: n.domains for n in nodes}) == assignment


def test_heterogeneous_gangs_exchange_only_members_of_identical_requests() -> None:
    nodes = [node("b0", "r0", f"b0-r0-n{i}", gpu=4) for i in range(4)]
    # keys in another order than the ranks (members of one size are packed in key order)
    big = [Member(f"big-{i * 3 % 4}", {"cpu": 1000, GPU: 2}, (0, i)) for i in range(4)]
    small = [Member(f"small-{i * 3 % 8}", {"cpu": 1000, GPU: 1}, (1, i)) for i in range(8)]
    members = big + small
    random.Random(5).shuffle(members)
    ranked_result = placed(place_gang(nodes, members, LEVELS, RACK, None))
    plain = [Member(m.key, m.requests) for m in members]
    plain_result = placed(place_gang(nodes, plain, LEVELS, RACK, None))
    check_valid(ranked_result, nodes, members, RACK)

    def per_node(result: Placement) -> Counter[tuple[str, int]]:
        return Counter((node, int("big" in key)) for key, node in result.assignment.items())

    assert per_node(ranked_result) == per_node(plain_result)  # same slots per node and request shape
    for shape in (big, small):
        on = runs(ranked_result, shape)
        assert on == sorted(on), on  # each shape's ranks go through its nodes in order
        assert breaks(on) == len(set(on)) - 1


@pytest.mark.parametrize("seed", range(60))
def test_rank_breaks_are_minimal_for_homogeneous_gangs(seed: int) -> None:
    """Consecutive ranks change node exactly (nodes used - 1) times, and the nodes go by domain path;
    which nodes and how many members each takes is what the search chose without ranks."""
    rng = random.Random(seed)
    nodes = [node(f"b{rng.randrange(2)}", f"r{rng.randrange(3)}", f"node-{i:02d}", gpu=rng.randrange(0, 9))
             for i in range(rng.randrange(2, 14))]
    rng.shuffle(nodes)
    gpu = rng.choice((1, 2, 4))
    total = sum(c.free[GPU] // gpu for c in nodes)
    if total == 0:
        return
    members = ranked(rng.randrange(1, total + 1), gpu=gpu, seed=seed)
    required = rng.choice((None, None, RACK))
    result = place_gang(nodes, members, LEVELS, required, None)
    plain = place_gang(nodes, [Member(m.key, m.requests) for m in members], LEVELS, required, None)
    if not isinstance(plain, Placement):
        assert not isinstance(result, Placement)
        return
    result = placed(result)
    check_valid(result, nodes, members, required)
    assert Counter(result.assignment.values()) == Counter(plain.assignment.values())
    on = runs(result, members)
    assert breaks(on) == len(set(on)) - 1, on
    where = position(nodes)
    assert [where[n] for n in on] == sorted(where[n] for n in on)


def test_sliced_homogeneous_gangs_keep_consecutive_ranks_in_each_slice() -> None:
    nodes = cluster(1, 2, 2, gpu=2)  # two racks of 4 GPUs
    members = ranked(8)
    result = placed(place_sliced(nodes, members, LEVELS, None, None, RACK, 4))
    on = runs(result, members)
    racks = [name.rsplit("-", 1)[0] for name in on]
    assert breaks(racks) == 1 and breaks(on) == 3, on


# --------------------------------------------------------------------------------------------------
# Through the coordinator: kube-scheduler filters members in any order


def indexed_member(name: str, index: int, gpus: int) -> dict[str, object]:
    pod = gang_pod(name, gang="ring", min_count=8, gpus=gpus, preferred="rack")
    pod["metadata"].setdefault("labels", {})[INDEX] = str(index)
    return pod


@pytest.mark.parametrize("seed", range(4))
async def test_each_member_filtered_in_any_order_gets_its_own_ranks_node(seed: int) -> None:
    world = World(racks=1, nodes_per_rack=4)  # two blocks, each one rack of four 8-GPU nodes
    # Names that sort apart from ranks, as an Indexed Job's do once indexes pass 9.
    names = {index: f"ring-{index * 7 % 8}{index}" for index in range(8)}
    for index, name in names.items():
        world.add(indexed_member(name, index, gpus=4))
    order = list(names.values())
    random.Random(seed).shuffle(order)
    got = {}
    for name in order:
        passing = world.filter(name).passing
        assert len(passing) == 1, passing
        got[name] = passing[0]
    on = [got[names[i]] for i in range(8)]
    assert [on[i] == on[i + 1] for i in range(0, 8, 2)] == [True] * 4, on
    rack = world.rack_of(on[0])
    assert all(world.rack_of(n) == rack for n in on), on
    assert on == sorted(on) and len(set(on)) == 4, on  # the rack's nodes, in name order
