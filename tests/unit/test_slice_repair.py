"""Replacements of a running sliced gang go back into the slices that lost them."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.topology.slice_repair import place_replacements_in_slices, slice_holes

from .test_placement import LEVELS, RACK, by_name, gang, no_fit, node, placed

A, B, C = ("b0", "b0-r0"), ("b0", "b0-r1"), ("b0", "b0-r2")


def test_holes_are_what_each_domain_lacks_for_whole_slices() -> None:
    assert slice_holes([A, A, A, B, B], 2, 6) == {A: 1}
    assert slice_holes([A, A, B, B], 2, 6) == {}  # a whole slice lost: no hole, a new slice
    assert slice_holes([A, B, B, C], 4, 8) == {A: 3, B: 2, C: 3}


def test_a_domain_holding_the_smaller_last_slice_is_whole() -> None:
    # 5 members in slices of 2: the last slice has 1 member, and A's single survivor may be it.
    assert slice_holes([A, B, B, C], 2, 5) == {C: 1}
    # 5 in slices of 3: the last slice has 2; A's survivor is taken to be in it and lacks 1.
    assert slice_holes([A, B, B], 3, 5) == {A: 1, B: 1}


def test_the_replacement_completes_its_slice_even_where_the_fit_is_looser() -> None:
    """Packing alone prefers the tightest node (rack 1's, 1 GPU free); the hole is in rack 0."""
    candidates = [node("b0", "r0", "roomy", gpu=8), node("b0", "r1", "tight", gpu=1)]
    result = placed(place_replacements_in_slices(candidates, gang(1), LEVELS, RACK, 2, [A, B, B]))
    assert result.assignment == {"placeholder-0": "roomy"}


def test_a_hole_whose_domain_has_no_room_places_nothing() -> None:
    candidates = [node("b0", "r0", "full", gpu=0), node("b0", "r1", "free", gpu=8)]
    reason = no_fit(place_replacements_in_slices(candidates, gang(1), LEVELS, RACK, 2, [A, B, B])).reason
    assert "b0/b0-r0" in reason and "replacement" in reason


def test_fewer_replacements_than_holes_places_nothing() -> None:
    candidates = [node("b0", "r0", "n0"), node("b0", "r1", "n1")]
    reason = no_fit(place_replacements_in_slices(candidates, gang(1), LEVELS, RACK, 3, [A, B])).reason
    assert "cannot complete" in reason


def test_a_whole_lost_slice_is_placed_again_in_one_domain() -> None:
    candidates = [node("b0", "r0", "n0", gpu=1), node("b0", "r1", "n1", gpu=1),
                  node("b0", "r2", "n2", gpu=1), node("b0", "r2", "n3", gpu=1)]
    result = placed(place_replacements_in_slices(candidates, gang(2), LEVELS, RACK, 2, [A, A]))
    nodes = by_name(candidates)
    assert {nodes[n].domains[:2] for n in result.assignment.values()} == {C}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.lists(st.integers(1, 3), min_size=1, max_size=4), st.data())
def test_survivors_and_replacements_make_whole_slices(size: int, slices_per_rack: list[int],
                                                      data: st.DataObject) -> None:
    """A valid sliced placement loses random members; with room everywhere, the replacements
    restore a gang every domain of which holds whole slices (the last one may be smaller, once)."""
    racks = [("b0", f"b0-r{i}") for i in range(len(slices_per_rack))]
    members = [rack for rack, count in zip(racks, slices_per_rack, strict=True) for _ in range(count * size)]
    last = data.draw(st.integers(0, size - 1))
    if last:
        members = members[: len(members) - (size - last)]  # the final slice is smaller
    lost = data.draw(st.sets(st.integers(0, len(members) - 1), min_size=1, max_size=len(members)))
    survivors = [p for i, p in enumerate(members) if i not in lost]
    candidates = [node("b0", f"r{i}", f"n{i}", gpu=64) for i in range(len(racks))]
    result = placed(place_replacements_in_slices(candidates, gang(len(lost)), LEVELS, RACK, size, survivors))
    nodes = by_name(candidates)
    final = Counter(survivors) + Counter(nodes[n].domains[:2] for n in result.assignment.values())
    assert sum(final.values()) == len(members)
    extras = [count % size for count in final.values() if count % size]
    assert extras in ([], [len(members) % size]), (final, size)
    assert sum(1 for n in result.assignment.values() if n) == len(lost)
