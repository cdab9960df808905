"""The gang state machine: the transition table, its enforcement, and the design document."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.gang.state import (
    TRANSITIONS,
    Facts,
    GangState,
    IllegalTransition,
    Phase,
    derive_phase,
    transition,
    transition_table_markdown,
)

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def facts(**overrides: object) -> Facts:
    base: dict[str, object] = dict(spec_valid=True, declared=True, alive=4, running=0, min_count=4,
                                   reserved=0, held=0, binding=False, backing_off=False)
    base.update(overrides)
    return Facts(**base)  # type: ignore[arg-type]


def test_the_design_document_shows_the_transition_table_of_the_code() -> None:
    assert transition_table_markdown() in DESIGN.read_text(encoding="utf-8")


def test_every_phase_has_a_row_and_never_lists_itself() -> None:
    assert set(TRANSITIONS) == set(Phase)
    for source, targets in TRANSITIONS.items():
        assert source not in targets


@pytest.mark.parametrize(("source", "target"), [
    (Phase.BACKOFF, Phase.RESERVED),  # reserving while backing off
    (Phase.PENDING, Phase.BINDING),  # binding without a reservation
    (Phase.WAITING_FOR_MEMBERS, Phase.RECOVERING),  # recovering a gang that never ran
    (Phase.DEACTIVATED, Phase.RESERVED),  # placing a gang past its requeue limit
    (Phase.BACKOFF, Phase.BINDING),  # binding during a backoff
])
def test_illegal_moves_raise_in_strict_mode_and_are_counted_otherwise(source: Phase, target: Phase) -> None:
    moves: list[tuple[Phase, Phase]] = []
    state = GangState("ml/g", 0.0, phase=source)
    with pytest.raises(IllegalTransition):
        transition(state, target, "test", strict=True, count=lambda a, b: moves.append((a, b)))
    assert state.phase == source and moves == []
    transition(state, target, "test", strict=False, count=lambda a, b: moves.append((a, b)))
    assert state.phase == target and moves == [(source, target)]


def test_a_legal_move_records_its_reason() -> None:
    state = GangState("ml/g", 0.0)
    transition(state, Phase.PENDING, "enough members", strict=True, count=lambda a, b: None)
    assert (state.phase, state.reason) == (Phase.PENDING, "enough members")


@pytest.mark.parametrize(("overrides", "phase"), [
    ({"spec_valid": False}, Phase.MISCONFIGURED),
    ({"deactivated": True, "running": 4}, Phase.DEACTIVATED),
    ({"recovering": True, "running": 3, "reserved": 1}, Phase.RECOVERING),
    ({"recovering": True, "running": 3, "reserved": 1, "held": 1}, Phase.BINDING),
    ({"declared": False, "alive": 0}, Phase.WAITING_FOR_MEMBERS),
    ({"alive": 3}, Phase.WAITING_FOR_MEMBERS),
    ({}, Phase.PENDING),
    ({"reserved": 4}, Phase.RESERVED),
    ({"reserved": 4, "held": 2}, Phase.BINDING),
    ({"running": 4, "binding": True}, Phase.BINDING),  # never Bound before the binds are accepted
    ({"running": 4}, Phase.BOUND),
    ({"running": 3}, Phase.PENDING),  # one short of quorum: never Bound
    ({"backing_off": True}, Phase.BACKOFF),
])
def test_the_phase_follows_the_facts(overrides: dict[str, object], phase: Phase) -> None:
    assert derive_phase(facts(**overrides)) == phase
