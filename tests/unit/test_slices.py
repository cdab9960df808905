"""Slice-aware placement: every slice of consecutive members in one domain, checked on examples and
against a brute-force search over small random clusters."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.topology import slices as slices_module
from extender.topology.placement import CandidateNode, Member, NoFit, Placement, place_gang
from extender.topology.slices import place_sliced

from .test_placement import (
    BLOCK,
    GPU,
    HOST,
    LEVELS,
    RACK,
    by_name,
    check_valid,
    cluster,
    gang,
    no_fit,
    node,
    placed,
)


def rack_of(result: Placement, candidates: Sequence[CandidateNode], key: str) -> tuple[str, ...]:
    return by_name(candidates)[result.assignment[key]].domains[:2]


def check_slices(
    result: Placement, candidates: Sequence[CandidateNode], members: Sequence[Member], level: int, size: int
) -> None:
    """Each run of ``size`` consecutive members sits in one labelled domain at ``level``."""
    nodes = by_name(candidates)
    for start in range(0, len(members), size):
        paths = {nodes[result.assignment[m.key]].domains[: level + 1] for m in members[start : start + size]}
        assert len(paths) == 1, (start, paths)
        assert next(iter(paths))[level] != ""


def slice_domains(result: Placement, candidates: Sequence[CandidateNode], level: int) -> int:
    nodes = by_name(candidates)
    return len({nodes[name].domains[: level + 1] for name in result.assignment.values()})


# --------------------------------------------------------------------------------------------------
# Examples


def two_blocks() -> list[CandidateNode]:
    """Both blocks have 8 free GPUs, but only b1's racks hold 4 each; b0 is the tighter block."""
    return [
        node("b0", "r0", "a0", gpu=6),
        node("b0", "r1", "a1", gpu=2),
        node("b1", "r0", "c0", gpu=2),
        node("b1", "r0", "c1", gpu=2),
        node("b1", "r1", "d0", gpu=4),
    ]


def test_block_required_with_rack_slices() -> None:
    candidates = two_blocks()
    members = gang(8, cpu=1000)
    # without slices the tighter block b0 would do, splitting a group of 4 over two racks
    assert placed(place_gang(candidates, members, LEVELS, BLOCK, None)).domain == ("b0",)

    result = placed(place_sliced(candidates, members, LEVELS, BLOCK, None, RACK, 4))
    check_valid(result, candidates, members, BLOCK)
    check_slices(result, candidates, members, RACK, 4)
    assert result.domain == ("b1",)
    assert {rack_of(result, candidates, m.key) for m in members[:4]} != {
        rack_of(result, candidates, m.key) for m in members[4:]
    }
    assert result.domains_used == 2


def test_shortfall_names_the_best_required_domain() -> None:
    b0 = two_blocks()[:2]
    result = no_fit(place_sliced(b0, gang(8, cpu=1000), LEVELS, BLOCK, None, RACK, 4))
    assert (
        result.reason
        == "needs 8 × {cpu: 1, nvidia.com/gpu: 1} in slices of 4 per rack; best block fits 1 slice"
    )
    anywhere = no_fit(place_sliced(b0, gang(8, cpu=1000), LEVELS, None, None, RACK, 4))
    assert anywhere.reason.endswith("in slices of 4 per rack; candidate nodes fit 1 slice")
    none = no_fit(place_sliced(b0, gang(14, cpu=1000), LEVELS, None, None, RACK, 7))
    assert none.reason.endswith("in slices of 7 per rack; candidate nodes fit 0 slices")
    unlabelled = [node("b0", "", "x", gpu=8)]
    assert no_fit(place_sliced(unlabelled, gang(2), LEVELS, BLOCK, None, RACK, 2)).reason == (
        "needs 2 × {cpu: 4, nvidia.com/gpu: 1} in slices of 2 per rack; no candidate node has a rack label"
    )
    no_block = [node("", "r0", "x", gpu=8)]
    assert no_fit(place_sliced(no_block, gang(2), LEVELS, BLOCK, None, RACK, 1)).reason.endswith(
        "; best block fits 0 slices (no candidate node has a block label)"
    )


def test_slices_share_a_rack_and_use_the_fewest_racks() -> None:
    candidates = [
        node("b0", "r0", "a0", gpu=4),
        node("b0", "r0", "a1", gpu=4),  # r0: 8, room for two slices
        node("b0", "r1", "b0", gpu=4),
        node("b0", "r2", "c0", gpu=4),
    ]
    members = gang(12)
    result = placed(place_sliced(candidates, members, LEVELS, BLOCK, None, RACK, 4))
    check_valid(result, candidates, members, BLOCK)
    check_slices(result, candidates, members, RACK, 4)
    racks = Counter(rack_of(result, candidates, m.key) for m in members)
    assert sorted(racks.values()) == [4, 8]
    assert racks[("b0", "b0-r0")] == 8
    # the whole gang in one rack when one holds it
    eight = placed(place_sliced(candidates, gang(8), LEVELS, None, None, RACK, 4))
    assert set(eight.assignment.values()) == {"a0", "a1"}


def test_a_rack_with_room_for_three_never_takes_a_slice_of_four() -> None:
    candidates = [
        node("b0", "r0", "a0", gpu=3),
        node("b0", "r1", "b0", gpu=2),
        node("b0", "r1", "b1", gpu=2),
        node("b0", "r2", "c0", gpu=3),
    ]
    four = placed(place_sliced(candidates, gang(4), LEVELS, BLOCK, None, RACK, 4))
    assert set(four.assignment.values()) == {"b0", "b1"}
    # the block has 10 GPUs and takes 8 without slices, but only one rack holds a slice
    assert isinstance(place_gang(candidates, gang(8), LEVELS, BLOCK, None), Placement)
    short = no_fit(place_sliced(candidates, gang(8), LEVELS, BLOCK, None, RACK, 4))
    assert short.reason.endswith("; best block fits 1 slice")


def test_a_smaller_last_slice_uses_the_room_left_in_a_rack() -> None:
    candidates = [
        node("b0", "r0", "a0", gpu=6),  # one slice of 4 and the last slice of 2
        node("b0", "r1", "b0", gpu=4),
    ]
    members = gang(10)
    result = placed(place_sliced(candidates, members, LEVELS, BLOCK, None, RACK, 4))
    check_valid(result, candidates, members, BLOCK)
    check_slices(result, candidates, members, RACK, 4)
    assert {result.assignment[m.key] for m in members[8:]} == {"a0"}
    # 5 + 5 GPUs hold two slices of 4 but leave no rack with 2 for the last slice
    tight = [node("b0", "r0", "a0", gpu=5), node("b0", "r1", "b0", gpu=5)]
    short = no_fit(place_sliced(tight, members, LEVELS, BLOCK, None, RACK, 4))
    assert (
        short.reason
        == "needs 10 × {cpu: 4, nvidia.com/gpu: 1} in slices of 4 per rack; best block fits 2 slices"
    )
    # a third rack with 2 takes it
    more = [*tight, node("b0", "r2", "c0", gpu=2)]
    spread = placed(place_sliced(more, members, LEVELS, BLOCK, None, RACK, 4))
    assert {spread.assignment[m.key] for m in members[8:]} == {"c0"}


def test_preferred_block_is_met_when_a_block_holds_the_slices() -> None:
    candidates = two_blocks()
    members = gang(8)
    result = placed(place_sliced(candidates, members, LEVELS, None, BLOCK, RACK, 4))
    check_valid(result, candidates, members)
    check_slices(result, candidates, members, RACK, 4)
    assert result.domain == ("b1",)
    # tightest preferred block first: b2 also holds the slices but has more free
    roomy = [*candidates, node("b2", "r0", "e0", gpu=5), node("b2", "r1", "e1", gpu=5)]
    assert placed(place_sliced(roomy, members, LEVELS, None, BLOCK, RACK, 4)).domain == ("b1",)
    # no block holds the slices: spread over blocks, each slice still in one rack
    split = [node("b0", "r0", "a0", gpu=4), node("b0", "r1", "a1", gpu=2), node("b1", "r0", "c0", gpu=4)]
    spread = placed(place_sliced(split, members, LEVELS, None, BLOCK, RACK, 4))
    check_slices(spread, split, members, RACK, 4)
    assert spread.domain == ()
    assert set(spread.assignment.values()) == {"a0", "c0"}


def test_preferred_at_or_below_the_slice_level() -> None:
    candidates = [node("b0", "r0", "a0", gpu=2), node("b0", "r0", "a1", gpu=2), node("b0", "r1", "b0", gpu=4)]
    # a rack preference is met by one rack holding every slice
    rack = placed(place_sliced(candidates, gang(4), LEVELS, None, RACK, RACK, 2))
    assert rack.domain == ("b0", "b0-r1")
    # a host preference is applied inside the slice domain
    host = placed(place_sliced(candidates, gang(4), LEVELS, None, HOST, RACK, 2))
    assert host.domain == ("b0", "b0-r1", "b0")
    # not met: the gang needs two racks
    both = placed(place_sliced(candidates, gang(8), LEVELS, None, RACK, RACK, 2))
    assert both.domain == ()
    check_slices(both, candidates, gang(8), RACK, 2)


def test_required_and_preferred_report_the_required_domain() -> None:
    candidates = [*two_blocks(), node("b1", "r2", "f0", gpu=8)]
    result = placed(place_sliced(candidates, gang(8), LEVELS, BLOCK, RACK, RACK, 4))
    assert result.domain == ("b1",)
    assert set(result.assignment.values()) == {"f0"}  # the preference (one rack) is met inside b1


def test_slice_level_at_or_above_the_requirement_is_place_gang() -> None:
    candidates = cluster(2, 2, 2, gpu=2)
    for slice_level in (BLOCK, RACK):
        for size in (1, 3):
            members = gang(5)
            expected = place_gang(candidates, members, LEVELS, RACK, HOST)
            assert place_sliced(candidates, members, LEVELS, RACK, HOST, slice_level, size) == expected
    assert place_sliced(candidates, gang(9), LEVELS, RACK, None, BLOCK, 2) == place_gang(
        candidates, gang(9), LEVELS, RACK, None
    )


def test_one_slice_is_place_gang_at_the_slice_level_inside_the_requirement() -> None:
    candidates = two_blocks()
    members = gang(4)
    for size in (4, 9):
        one = placed(place_sliced(candidates, members, LEVELS, None, None, RACK, size))
        assert one.assignment == placed(place_gang(candidates, members, LEVELS, RACK, None)).assignment
        inside = placed(place_sliced(candidates, members, LEVELS, BLOCK, None, RACK, size))
        block = [c for c in candidates if c.domains[0] == inside.domain[0]]
        assert inside.assignment == placed(place_gang(block, members, LEVELS, RACK, None)).assignment


def test_heterogeneous_slices_go_largest_first() -> None:
    candidates = [
        node("b0", "r0", "a0", gpu=3),
        node("b0", "r0", "a1", gpu=3),
        node("b0", "r1", "b0", gpu=1),
        node("b0", "r1", "b1", gpu=1),
    ]
    small = [Member(f"s{i}", {"cpu": 1000, GPU: 1}) for i in range(2)]
    large = [Member(f"l{i}", {"cpu": 1000, GPU: 3}) for i in range(2)]
    members = [*small, *large]
    result = placed(place_sliced(candidates, members, LEVELS, BLOCK, None, RACK, 2))
    check_valid(result, candidates, members, BLOCK)
    check_slices(result, candidates, members, RACK, 2)
    assert {result.assignment[m.key] for m in large} == {"a0", "a1"}
    short = no_fit(place_sliced(candidates[:3], members, LEVELS, None, None, RACK, 2))
    assert short.reason == (
        "needs 4 pods (total {cpu: 4, nvidia.com/gpu: 8}) in slices of 2 per rack; "
        "candidate nodes fit 1 slice"
    )


def test_empty_inputs_and_invalid_arguments() -> None:
    assert place_sliced(cluster(1, 1, 1), [], LEVELS, None, None, RACK, 2) == Placement({}, (), 0)
    assert place_sliced([], gang(2), LEVELS, None, None, RACK, 2) == NoFit(
        "no candidate nodes passed the scheduler's filters"
    )
    cases: list[Callable[[], object]] = [
        lambda: place_sliced(cluster(1, 1, 1), gang(1), LEVELS, None, None, 3, 2),
        lambda: place_sliced(cluster(1, 1, 1), gang(1), LEVELS, None, None, -1, 2),
        lambda: place_sliced(cluster(1, 1, 1), gang(1), LEVELS, None, None, RACK, 0),
        lambda: place_sliced(cluster(1, 1, 1), gang(1), LEVELS, 3, None, RACK, 2),
        lambda: place_sliced(cluster(1, 1, 1), gang(1), LEVELS, None, 5, RACK, 2),
        lambda: place_sliced(cluster(1, 1, 1), gang(1), (), None, None, 0, 2),
        lambda: place_sliced([CandidateNode("x", ("b0",), {}, 1)], gang(1), LEVELS, None, None, RACK, 2),
        lambda: place_sliced(
            cluster(1, 1, 1), [Member("a", {}), Member("a", {})], LEVELS, None, None, RACK, 1
        ),
    ]
    for bad in cases:
        with pytest.raises(ValueError):
            bad()


def test_deterministic_and_independent_of_candidate_order() -> None:
    rng = random.Random(11)
    candidates = [
        node(c.domains[0], c.domains[1].split("-")[1], c.name, gpu=rng.randint(0, 8))
        for c in cluster(3, 3, 3)
    ]
    for required, preferred, size, per in ((BLOCK, None, 20, 4), (None, BLOCK, 30, 6), (None, None, 50, 3)):
        first = place_sliced(candidates, gang(size), LEVELS, required, preferred, RACK, per)
        check_slices(placed(first), candidates, gang(size), RACK, per)
        shuffled = list(candidates)
        rng.shuffle(shuffled)
        assert place_sliced(shuffled, gang(size), LEVELS, required, preferred, RACK, per) == first


def test_work_is_bounded_by_domains_times_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    def counting(*args: object, **kwargs: object) -> Placement | NoFit:
        nonlocal calls
        calls += 1
        return place_gang(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(slices_module, "place_gang", counting)
    # 16 racks of two 1-GPU nodes: each rack passes the aggregate bound for a 2-GPU member, none packs it
    candidates = cluster(2, 8, 2, gpu=1)
    members = [Member(f"m{i}", {"cpu": 1000 * (1 + i % 2), GPU: 2}) for i in range(12)]
    no_fit(place_sliced(candidates, members, LEVELS, BLOCK, None, RACK, 1))
    racks, pieces, blocks = 16, 12, 2
    assert racks * pieces <= calls <= 3 * racks * pieces + blocks


# --------------------------------------------------------------------------------------------------
# Brute force


def brute_min_slice_domains(
    candidates: Sequence[CandidateNode],
    members: Sequence[Member],
    required: int | None,
    level: int,
    size: int,
) -> int | None:
    """Fewest slice domains over every valid assignment of identical members; None when none exists.

    Members go to nodes one by one in order; identical members allow two symmetry cuts: node indices
    never decrease inside a slice, and the first node of each full slice never decreases.
    """
    nodes = list(candidates)
    frees = [Counter(dict(c.free)) for c in nodes]
    slots = [c.pods_free for c in nodes]
    req = members[0].requests if members else {}
    full = len(members) // size
    best: int | None = None
    used: Counter[tuple[str, ...]] = Counter()

    def allowed(j: int, i: int, prev: int, first: int, home: tuple[str, ...] | None) -> bool:
        c = nodes[j]
        if slots[j] < 1 or any(frees[j][r] < q for r, q in req.items() if q > 0) or not c.domains[level]:
            return False
        if required is not None and (
            not c.domains[required] or (home is not None and c.domains[: required + 1] != home)
        ):
            return False
        if i % size:  # inside a slice: same slice domain, non-decreasing node index
            return j >= prev and c.domains[: level + 1] == nodes[prev].domains[: level + 1]
        return i // size >= full or j >= first  # a new full slice starts no lower than the last one

    def visit(i: int, prev: int, first: int, home: tuple[str, ...] | None) -> None:
        nonlocal best
        if best is not None and len(used) >= best:
            return
        if i == len(members):
            best = len(used)
            return
        for j in range(len(nodes)):
            if not allowed(j, i, prev, first, home):
                continue
            c = nodes[j]
            slots[j] -= 1
            frees[j].subtract(req)
            used[c.domains[: level + 1]] += 1
            here = c.domains[: required + 1] if required is not None else None
            visit(i + 1, j, j if i % size == 0 else first, home or here)
            used[c.domains[: level + 1]] -= 1
            if not used[c.domains[: level + 1]]:
                del used[c.domains[: level + 1]]
            frees[j].update(req)
            slots[j] += 1

    visit(0, 0, 0, None)
    return best


@st.composite
def small_clusters(draw: st.DrawFn) -> list[CandidateNode]:
    """Up to 2 blocks x 2 racks x 2 hosts with small capacities; some nodes absent, some racks unlabelled."""
    out = []
    for b in range(2):
        for r in range(2):
            for h in range(2):
                if draw(st.integers(0, 5)) == 0:
                    continue
                name = f"b{b}-r{r}-n{h}"
                rack = "" if draw(st.integers(0, 9)) == 0 else f"b{b}-r{r}"
                free = {"cpu": draw(st.sampled_from([0, 1000, 2000, 3000])), GPU: draw(st.integers(0, 3))}
                out.append(CandidateNode(name, (f"b{b}", rack, name), free, draw(st.integers(0, 3))))
    return out


def requests() -> st.SearchStrategy[dict[str, int]]:
    return st.fixed_dictionaries({"cpu": st.sampled_from([0, 500, 1000]), GPU: st.sampled_from([0, 1, 1, 2])})


CONSTRAINTS = st.tuples(
    st.sampled_from([None, BLOCK]),
    st.sampled_from([None, BLOCK, RACK, HOST]),
    st.sampled_from([RACK, RACK, HOST, BLOCK]),
    st.integers(1, 3),
)
Constraints = tuple[int | None, int | None, int, int]


def check_result(
    result: Placement | NoFit,
    candidates: list[CandidateNode],
    members: list[Member],
    constraints: Constraints,
) -> None:
    """A placement respects capacity, the requirement, every slice, and reports the domain it promises."""
    required, preferred, level, size = constraints
    if isinstance(result, NoFit):
        assert result.reason.startswith("needs ") or result.reason.startswith("no candidate")
        return
    check_valid(result, candidates, members, required)
    check_slices(result, candidates, members, level, size)
    if required is None and preferred is not None and result.domain:
        assert len(result.domain) == preferred + 1
        nodes = by_name(candidates)
        assert all(
            nodes[name].domains[: preferred + 1] == result.domain for name in result.assignment.values()
        )


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters(), requests(), st.integers(1, 6), CONSTRAINTS, st.randoms(use_true_random=False))
def test_homogeneous_gangs_match_brute_force(
    candidates: list[CandidateNode],
    req: dict[str, int],
    count: int,
    constraints: Constraints,
    rng: random.Random,
) -> None:
    required, preferred, level, size = constraints
    members = [Member(f"m{i}", dict(req)) for i in range(count)]
    result = place_sliced(candidates, members, LEVELS, required, preferred, level, size)
    shuffled = list(candidates)
    rng.shuffle(shuffled)
    assert place_sliced(shuffled, members, LEVELS, required, preferred, level, size) == result
    check_result(result, candidates, members, constraints)
    fewest = brute_min_slice_domains(candidates, members, required, level, size)
    assert isinstance(result, Placement) == (fewest is not None), (result, fewest)
    if isinstance(result, Placement) and preferred is None:
        # compact: no assignment inside the chosen domain uses fewer slice domains
        scope = [c for c in candidates if c.domains[: len(result.domain)] == result.domain]
        assert slice_domains(result, candidates, level) == brute_min_slice_domains(
            scope, members, required, level, size
        )


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_clusters(), st.lists(requests(), min_size=1, max_size=6), CONSTRAINTS)
def test_heterogeneous_placements_respect_capacity_and_slices(
    candidates: list[CandidateNode], reqs: list[dict[str, int]], constraints: Constraints
) -> None:
    required, preferred, level, size = constraints
    members = [Member(f"m{i}", r) for i, r in enumerate(reqs)]
    result = place_sliced(candidates, members, LEVELS, required, preferred, level, size)
    assert place_sliced(candidates, members, LEVELS, required, preferred, level, size) == result
    check_result(result, candidates, members, constraints)
