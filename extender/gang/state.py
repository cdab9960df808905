"""The gang lifecycle as an explicit state machine, and the registry's writers.

A gang's phase is a summary of facts that live elsewhere (members in the cache, reservations in
the ledger, held binds, timers). After each change the coordinator derives the phase those facts
imply (``derive_phase``) and moves the gang there through ``transition``, the one function that
changes a phase: it checks the move against ``TRANSITIONS``, records the reason and counts it. An
illegal move means a bug in the core (for example reserving during a backoff), so it raises in
tests and is logged loudly in production.

``GangState`` keeps what several parts use. Those they read and change (reason, held binds,
backoff, the reservation's shape, failure counts, the declaration seen) change only through the
functions at the end of this module; any other field is written by one part alone. What one part
alone uses lives in that part's table, which the registry (``registry.py``) empties when it
forgets the gang (``tests/unit/test_state_ownership.py`` checks both).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from ..cluster.records import GangSpec, PodRecord

log = logging.getLogger(__name__)


class Phase(StrEnum):
    WAITING_FOR_MEMBERS = "WaitingForMembers"
    PENDING = "Pending"
    RESERVED = "Reserved"
    BINDING = "Binding"
    BOUND = "Bound"
    BACKOFF = "Backoff"
    RECOVERING = "Recovering"
    DEACTIVATED = "Deactivated"
    MISCONFIGURED = "Misconfigured"


P = Phase
# Where a gang may go from each phase. Everything not listed is a bug in the core.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    # Waiting or Pending -> Backoff only when a restarted Quorum resumes a requeue's backoff.
    P.WAITING_FOR_MEMBERS: frozenset({P.PENDING, P.RESERVED, P.BOUND, P.MISCONFIGURED, P.DEACTIVATED,
                                      P.BACKOFF}),
    P.PENDING: frozenset({P.WAITING_FOR_MEMBERS, P.RESERVED, P.BOUND, P.MISCONFIGURED, P.DEACTIVATED,
                          P.BACKOFF}),
    P.RESERVED: frozenset({P.BINDING, P.BOUND, P.PENDING, P.WAITING_FOR_MEMBERS, P.BACKOFF,
                           P.MISCONFIGURED, P.DEACTIVATED}),
    P.BINDING: frozenset({P.BOUND, P.RESERVED, P.PENDING, P.WAITING_FOR_MEMBERS, P.BACKOFF,
                          P.RECOVERING, P.MISCONFIGURED, P.DEACTIVATED}),
    # A running gang may lose members (recovery; straight to Binding when a replacement's bind is
    # already held), miss its readiness deadline (requeue: Backoff), or run out of requeues.
    P.BOUND: frozenset({P.WAITING_FOR_MEMBERS, P.PENDING, P.RESERVED, P.RECOVERING, P.BINDING,
                        P.BACKOFF, P.MISCONFIGURED, P.DEACTIVATED}),
    # Reserved: a replacement was reserved, then a member succeeded; a finishing gang is not
    # recovered, so what is left is a gang below minCount with a reservation.
    P.RECOVERING: frozenset({P.BOUND, P.BINDING, P.BACKOFF, P.WAITING_FOR_MEMBERS, P.PENDING, P.RESERVED,
                             P.MISCONFIGURED, P.DEACTIVATED}),
    # A recovering gang whose replacements missed the bind timeout recovers on after its backoff.
    P.BACKOFF: frozenset({P.PENDING, P.WAITING_FOR_MEMBERS, P.BOUND, P.RECOVERING, P.MISCONFIGURED,
                          P.DEACTIVATED}),
    # Only a changed declaration (or the deactivation annotation removed) brings a gang back.
    P.DEACTIVATED: frozenset({P.WAITING_FOR_MEMBERS, P.PENDING, P.BOUND, P.MISCONFIGURED}),
    P.MISCONFIGURED: frozenset({P.WAITING_FOR_MEMBERS, P.PENDING, P.RESERVED, P.BOUND, P.BACKOFF,
                                P.DEACTIVATED}),
}


class IllegalTransition(RuntimeError):
    """The core tried a phase change the state machine does not allow."""


@dataclass(slots=True)
class HeldBind:
    """A bind call kube-scheduler is waiting on until the gang reaches quorum."""

    pod: PodRecord
    node: str
    answer: asyncio.Future[str]


@dataclass(slots=True)
class NoFitMemo:
    """A no-fit answer, valid while nothing it depends on moves (see ``Planner.fit_version``)."""

    version: tuple[int, ...]
    candidates: tuple[int, int]  # which nodes kube-scheduler offered (see ``fingerprint``)
    reason: str


@dataclass(frozen=True, slots=True)
class Claim:
    """Capacity earmarked for the head of the queue (``queue.py``): lower-ordered work keeps off."""

    gang: str
    priority: int
    made_at: float  # clock when it was made
    waiting_since: float  # when the gang started waiting (its place in the queue)
    level: str  # the level's name ("rack")
    domain: str  # "b0/b0-r1"
    nodes: frozenset[str]
    missing: int  # members' capacity missing there when it was made
    grandfathered: frozenset[str]  # gangs already reserved on those nodes when it was made
    envelope: Mapping[str, int]  # what one member needs at most (see topology.claims)
    needed: int  # members it must place
    per_node: int | None = None  # at most this many members per node (members that repel); None: any

    def reason(self, now: float) -> str:
        waited = max(0.0, now - self.waiting_since)
        shown = f"{waited / 60:.0f}m" if waited >= 120 else f"{waited:.0f}s"
        return f"capacity earmarked for gang {self.gang} (priority {self.priority}, waiting {shown})"


@dataclass(slots=True)
class Waiting:
    """The queue's own facts about a gang (``queue.py`` keeps them in a registry table)."""

    since: float = 0.0  # when it started waiting for capacity (0 when it is not waiting)
    blocked_by: str = ""  # the claim that kept it from a placement last time ("" when none did)


@dataclass(slots=True)
class ClaimEpoch:
    """Moves whenever a head-of-line claim is made or released (``queue.py`` moves it): part of a
    remembered no-fit's key (``planning.py`` reads it), since a claim changes what a gang may use."""

    value: int = 0


@dataclass(slots=True)
class GangState:
    """What Quorum remembers about one gang beyond the cache and the ledger."""

    key: str
    first_seen: float
    phase: Phase = Phase.WAITING_FOR_MEMBERS
    reason: str = ""
    domain: tuple[str, ...] = ()
    held: dict[str, HeldBind] = field(default_factory=dict)
    binds_in_flight: int = 0  # members whose bind call to the apiserver has not returned yet
    backoff_until: float = 0.0
    failures: int = 0
    replans: int = 0
    nofit: NoFitMemo | None = None
    min_count_reserved: int = 0
    spec_seen: GangSpec | None = None  # the declaration last acted on (status updates change nothing)
    # After the bind (lifecycle.py): quorum reached since the last requeue; minCount members Ready.
    started: bool = False
    pods_ready: bool = False
    members_started: bool = False  # at least minCount members started (the gang-started signal)
    # Members seen succeeded since the last requeue, kept after their pods are deleted: a finished
    # Job's pods are cleaned up, and its gang still did its work.
    finished: set[str] = field(default_factory=set)
    requeues: int = 0
    deactivated: str = ""  # why the gang is not scheduled again ("" when it is active)
    # Members Quorum is evicting: no longer counted as running, though the watch may not show
    # them deleted yet (a requeued gang must not look Bound again in the meantime).
    evicting: set[str] = field(default_factory=set)

    @property
    def completing(self) -> bool:
        """A member succeeded: the gang is finishing, not failing."""
        return bool(self.finished)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the phase is derived from, gathered by the coordinator."""

    spec_valid: bool
    declared: bool  # the gang's declaration exists (its PodGroup, or annotations)
    alive: int
    running: int  # bound members plus members whose bind succeeded but the watch has not shown
    min_count: int
    reserved: int
    held: int
    binding: bool
    backing_off: bool
    recovering: bool = False  # it ran at quorum and has since lost members (or their readiness)
    deactivated: bool = False


def derive_phase(facts: Facts) -> Phase:
    """The phase the facts imply; ``transition`` moves the gang there."""
    if not facts.spec_valid:
        return Phase.MISCONFIGURED
    if facts.deactivated:
        return Phase.DEACTIVATED
    if facts.binding:
        return Phase.BINDING  # not Bound before the apiserver has accepted the quorum's binds
    if not facts.declared and not (facts.reserved or facts.held):
        return Phase.WAITING_FOR_MEMBERS  # its PodGroup does not exist (yet)
    if facts.recovering:
        return Phase.BINDING if facts.held else Phase.RECOVERING
    if facts.running >= facts.min_count:
        return Phase.BOUND
    if facts.held:
        return Phase.BINDING
    if facts.reserved:
        return Phase.RESERVED
    if facts.backing_off:
        return Phase.BACKOFF
    if facts.alive < facts.min_count:
        return Phase.WAITING_FOR_MEMBERS
    return Phase.PENDING


def transition(state: GangState, to: Phase, reason: str, *, strict: bool,
               count: Callable[[Phase, Phase], None]) -> None:
    """The one place a gang changes phase: checks legality, records the reason, counts the move."""
    if to == state.phase:
        if reason:
            state.reason = reason
        return
    if to not in TRANSITIONS[state.phase]:
        message = f"gang {state.key}: illegal transition {state.phase} -> {to} ({reason})"
        if strict:
            raise IllegalTransition(message)
        log.error("illegal gang transition", extra={"gang": state.key, "from": str(state.phase),
                                                    "to": str(to), "reason": reason})
    count(state.phase, to)
    log.debug("gang phase", extra={"gang": state.key, "from": str(state.phase), "to": str(to),
                                   "reason": reason})
    state.phase = to
    if reason:
        state.reason = reason


def transition_table_markdown() -> str:
    """The table in docs/design.md is generated from ``TRANSITIONS`` so the two cannot disagree."""
    lines = ["| from | may move to |", "|---|---|"]
    for source, targets in TRANSITIONS.items():
        lines.append(f"| {source} | {', '.join(sorted(targets))} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the registry's writers
def set_reason(state: GangState, reason: str) -> None:
    """Why the gang is where it is (shown by filter answers, Events and /debug/gangs)."""
    state.reason = reason


def hold_bind(state: GangState, held: HeldBind) -> HeldBind | None:
    """Hold a member's bind call; the call for the same pod it supersedes, if any."""
    previous = state.held.get(held.pod.uid)
    state.held[held.pod.uid] = held
    return previous


def drop_held(state: GangState, uid: str, answer: asyncio.Future[str]) -> bool:
    """Forget a held call kube-scheduler gave up on, if it is still the one held (True then)."""
    current = state.held.get(uid)
    if current is None or current.answer is not answer:
        return False
    del state.held[uid]
    return True


def take_held(state: GangState) -> list[HeldBind]:
    """Every held call, no longer held: to be bound together, or answered with an error."""
    held = list(state.held.values())
    state.held.clear()
    return held


def start_backoff(state: GangState, until: float, reason: str) -> None:
    state.backoff_until = until
    state.reason = reason


def end_backoff(state: GangState) -> None:
    state.backoff_until = 0.0


def mark_started(state: GangState, started: bool) -> None:
    """Quorum reached (True), or the gang starts over (False)."""
    state.started = started


def note_reserved(state: GangState, domain: tuple[str, ...], min_count: int) -> None:
    """A placement reserved in ``domain``, counting on ``min_count`` members."""
    state.domain = domain
    state.min_count_reserved = min_count


def clear_reserved(state: GangState, reason: str) -> None:
    """The reservation dropped, for ``reason``."""
    state.domain = ()
    state.min_count_reserved = 0
    state.reason = reason


def count_failure(state: GangState) -> int:
    """One more quorum missed at bind (or re-planning given up): the backoff doubles."""
    state.failures += 1
    return state.failures


def count_replan(state: GangState, limit: int) -> bool:
    """One more re-plan; True (and the count starts over) past ``limit``."""
    state.replans += 1
    if state.replans <= limit:
        return False
    state.replans = 0
    return True


def reset_failures(state: GangState) -> None:
    """The gang reached quorum: earlier failures and re-plans no longer count."""
    state.failures = state.replans = 0


def see_declaration(state: GangState, spec: GangSpec) -> None:
    """The declaration last acted on (status updates of the same declaration change nothing)."""
    state.spec_seen = spec


@dataclass(slots=True)
class AfterBind:
    """What the lifecycle alone remembers about a gang (kept in the registry's table for it)."""

    recovering_since: float = 0.0  # when it fell below minCount (0: it has not)
    deactivation_seen: bool = False  # the PodGroup carries it (so its removal means reactivation)
    # (requeues, deactivated) Quorum last wrote on the PodGroup and has not seen come back yet:
    # until it does, what the watch shows is older than what Quorum knows.
    expected_bookkeeping: tuple[int, str] | None = None
    # A gang declared by annotations keeps its bookkeeping on its members: what to write on each
    # member, and the members that have it.
    stamp: dict[str, str | None] = field(default_factory=dict)
    stamped: set[str] = field(default_factory=set)
