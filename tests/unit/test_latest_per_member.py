"""``LatestPerMember`` against a plain model: a list of (member, value) in the order of their events.

The index shares equal values between members; that may not change which value is the gang's,
before or after members leave.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.cluster.membership import LatestPerMember

MEMBERS = st.sampled_from(["a", "b", "c", "d"])
GANGS = st.sampled_from(["g1", "g2"])
# Values that compare equal without being the same object, as parsed annotations are.
VALUES = st.sampled_from([2, 3, 4]).map(lambda n: ("min", n))
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("note"), GANGS, MEMBERS, VALUES),
        st.tuples(st.just("drop"), GANGS, MEMBERS, st.none()),
    ),
    max_size=40,
)


def model_latest(events: list[tuple[str, tuple[str, int]]]) -> tuple[str, int] | None:
    return events[-1][1] if events else None


@settings(max_examples=400, deadline=None)
@given(STEPS)
def test_the_latest_members_value_is_the_gangs_whatever_the_order(steps: list) -> None:
    index = LatestPerMember[tuple[str, int]]()
    model: dict[str, list[tuple[str, tuple[str, int]]]] = {}
    for verb, gang, member, value in steps:
        events = model.setdefault(gang, [])
        if verb == "note":
            events[:] = [event for event in events if event[0] != member] + [(member, value)]
            index.note(gang, member, value)
            continue
        was_latest = bool(events) and events[-1][0] == member
        known = any(event[0] == member for event in events)
        events[:] = [event for event in events if event[0] != member]
        expected = model_latest(events) if known and was_latest else None
        assert index.drop(gang, member) == expected
    for gang, events in model.items():
        kept = index.by_gang.get(gang, {})
        assert list(kept) == [event[0] for event in events]
        assert (kept[next(reversed(kept))] if kept else None) == model_latest(events)


def test_a_member_declaring_again_moves_last_and_shares_the_latest_value() -> None:
    index = LatestPerMember[tuple[str, int]]()
    first = tuple(["min", 3])
    index.note("g", "a", tuple(["min", 2]))
    index.note("g", "b", first)
    index.note("g", "a", tuple(["min", 3]))
    assert list(index.by_gang["g"]) == ["b", "a"]
    assert index.by_gang["g"]["a"] is first  # equal values share one object
    assert index.drop("g", "a") == ("min", 3)
    assert index.drop("g", "b") is None  # the last member: the gang's members are gone
    assert "g" not in index.by_gang
