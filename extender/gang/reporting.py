"""What users see of Quorum's decisions: Events and PodGroup conditions.

Every phase change becomes an Event with the same reason text filter gives, on the gang's PodGroup
or, for a gang declared by annotations, on its first member by name (one object per gang, so a
gang of 256 does not write 256 Events per step). Repeats are aggregated by the Event recorder in
``adapters``. PodGroup gangs also get conditions: the native ``PodGroupInitiallyScheduled`` (set
by Quorum because the scheduler's own gang handling is off in its profile), upstream's planned
live ``PodGroupSatisfied`` (kept up to date as members come and go, not only on phase changes: a
running gang that loses a member above ``minCount`` changes no phase) and Quorum's own.
A condition is written only when its status, reason or message changes, or when another writer
replaced what Quorum applied (kube-scheduler's group cycle, with ``GenericWorkload`` on).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cluster.records import PodRecord
from .core import Core
from .effects import (
    CONDITION_DEACTIVATED,
    CONDITION_INITIALLY_SCHEDULED,
    CONDITION_MESSAGE_LIMIT,
    CONDITION_PODS_READY,
    CONDITION_RECOVERING,
    CONDITION_SATISFIED,
    CONDITION_STARTED,
    NORMAL,
    WARNING,
    GangCondition,
    ObjectRef,
)
from .registry import GangRegistry
from .state import GangState, Phase
from .timers import Deadline

# Event (type, reason, action) for each phase a gang enters.
PHASE_EVENTS: dict[Phase, tuple[str, str, str]] = {
    Phase.WAITING_FOR_MEMBERS: (NORMAL, "WaitingForMembers", "Wait"),
    Phase.PENDING: (NORMAL, "Pending", "Place"),
    Phase.RESERVED: (NORMAL, "Reserved", "Reserve"),
    Phase.BINDING: (NORMAL, "Binding", "Bind"),
    Phase.BOUND: (NORMAL, "Bound", "Bind"),
    Phase.BACKOFF: (WARNING, "BackOff", "Requeue"),
    Phase.RECOVERING: (WARNING, "Recovering", "Recover"),
    Phase.DEACTIVATED: (WARNING, "Deactivated", "Deactivate"),
    Phase.MISCONFIGURED: (WARNING, "Misconfigured", "Validate"),
}
# A Recovering gang whose replacements bound is whole again.
RECOVERED_EVENT = (NORMAL, "Recovered", "Bind")
# A gang below minCount because members succeeded: finishing its work, not waiting for members.
FINISHING_EVENT = (NORMAL, "Finishing", "Finish")
# Phases a gang normally passes through in well under a second on its way to Bound: their Event
# is written only if the gang is still there this long after, when it tells why it is held (two
# Events a gang fewer otherwise, under the recorder's rate limit).
PASSING_PHASES = (Phase.RESERVED, Phase.BINDING)
PASSING_EVENT_SECONDS = 5.0
# A gang that falls below minCount while members are being deleted may be going as a whole (its
# Job or namespace deleted, the garbage collector taking pods one by one): its Recovering Event and
# conditions wait this long, or until the gang moves on, and are dropped if by then every member is
# on its way out. A failed member or a lost node is reported at once.
RECOVERING_GRACE_SECONDS = 5.0


# A waiting gang's shortfall goes to its conditions at most this often (its Event takes each one).
NOFIT_CONDITION_SECONDS = 30.0

# Quorum's value of a condition that another writer replaced goes back at most this often a gang.
REASSERT_SECONDS = 30.0
_SENT_REMEMBERED = 16  # condition values a gang remembers having sent (to tell its own echoes)

# A PodGroup condition as Quorum last applied it: (status, reason, message).
Applied = dict[str, tuple[bool, str, str]]


@dataclass(slots=True)
class Reported:
    """What reporting alone remembers about a gang (kept in the registry's table for it)."""

    was_recovering: bool = False  # since Recovering, not yet whole again (its Event says Recovered)
    conditions: Applied = field(default_factory=dict)  # applied to the PodGroup, per type
    nofit_written_at: float = -NOFIT_CONDITION_SECONDS  # when a shortfall last went to the conditions
    passing: tuple[Phase, str] | None = None  # a passing phase entered (or Recovering held back), its note
    sent: set[tuple[str, bool, str, str]] = field(default_factory=set)  # values applied, recent ones
    reasserted_at: float = -REASSERT_SECONDS  # when Quorum last put back a replaced condition


class Reporter:
    def __init__(self, core: Core, registry: GangRegistry) -> None:
        self.core = core
        self._registry = registry
        self._reported = registry.table(Reported)

    # ------------------------------------------------------------------ Events
    def gang(self, state: GangState, reason: str, note: str, type_: str) -> None:
        self._record(state.key, (type_, reason, reason), note or state.key)
        self.conditions(state)

    def pod(self, pod: PodRecord, reason: str, note: str, type_: str) -> None:
        ref = ObjectRef("Pod", "v1", pod.namespace, pod.name, pod.uid)
        self.core.actions.record_event(ref, type_, reason, reason, note)

    def _target(self, key: str) -> ObjectRef | None:
        spec = self.core.cache.gang_spec(key)
        home = spec.home if spec is not None else None
        if home is not None:
            return ObjectRef(home.kind, home.api_version, home.namespace, home.name)
        members = [m for m in self.core.cache.members(key) if not m.deleting]  # not one on its way out
        if not members:
            return None
        first = min(members, key=lambda m: m.name)
        return ObjectRef("Pod", "v1", first.namespace, first.name, first.uid)

    # ------------------------------------------------------------------ phase changes
    def phase_changed(self, state: GangState, source: Phase, target: Phase, reason: str) -> None:
        type_, event_reason, action = PHASE_EVENTS[target]
        reported = self._reported.of(state)
        if target == Phase.BOUND and reported.was_recovering:
            # Its own reason: a repeat "Bound" would fold into the first bind's Event and hide it.
            type_, event_reason, action = RECOVERED_EVENT
        # Between Recovering and whole again (its replacements may pass through Binding).
        reported.was_recovering = target in (Phase.RECOVERING, Phase.BINDING) and (
            target == Phase.RECOVERING or reported.was_recovering)
        if state.completing and target == Phase.WAITING_FOR_MEMBERS:
            type_, event_reason, action = FINISHING_EVENT
            reason = f"gang {state.key}: its members are finishing ({len(state.finished)} succeeded)"
        note = reason or f"gang {state.key}: {target}"
        timers = self._registry.timers
        held = reported.passing
        if held is not None and held[0] == Phase.RECOVERING and not self._going(state.key):
            self._record(state.key, PHASE_EVENTS[Phase.RECOVERING], held[1])  # before what follows it
        if target in PASSING_PHASES:
            reported.passing = (target, note)
            timers.arm(state.key, Deadline.PASSING, PASSING_EVENT_SECONDS, self._still_passing)
        elif target == Phase.RECOVERING and self._leaving(state.key):
            reported.passing = (target, note)
            timers.arm(state.key, Deadline.PASSING, RECOVERING_GRACE_SECONDS, self._still_passing)
        else:
            reported.passing = None
            timers.cancel(state.key, Deadline.PASSING)
            self._record(state.key, (type_, event_reason, action), note)
        self.conditions(state)

    def _leaving(self, key: str) -> bool:
        """A member is being deleted: the gang may be going as a whole."""
        return any(m.deleting for m in self.core.cache.members(key))

    def _going(self, key: str) -> bool:
        """Every member is being deleted, or none is left: the gang is going, not recovering."""
        return all(m.deleting for m in self.core.cache.members(key))

    def _record(self, key: str, event: tuple[str, str, str], note: str) -> None:
        ref = self._target(key)
        if ref is not None:
            self.core.actions.record_event(ref, event[0], event[1], event[2], note)

    def _still_passing(self, key: str) -> None:
        """The gang has stayed in a passing phase: now its Event says where it is held."""
        state = self._registry.gangs.get(key)
        passing = self._reported.of(state).passing if state is not None else None
        if state is None or passing is None or passing[0] != state.phase:
            return
        if state.phase != Phase.RECOVERING:
            self._record(key, PHASE_EVENTS[state.phase], passing[1])
            return
        self._reported.of(state).passing = None
        if not self._going(key):  # members stay (or replacements came): a loss, not a deletion
            self._record(key, PHASE_EVENTS[Phase.RECOVERING], passing[1])
            self.conditions(state)

    def nofit(self, state: GangState) -> None:
        """A gang that does not fit stays Pending: its shortfall is worth an Event all the same.

        The shortfall changes with every pod that comes and goes while the gang waits; its
        condition takes the newest text at most once per ``NOFIT_CONDITION_SECONDS``, as the
        Event's series does (a phase change still writes at once)."""
        target = self._target(state.key)
        if target is not None:
            self.core.actions.record_event(target, NORMAL, "NoFit", "NoFit", state.reason or state.key)
        wait = self._reported.of(state).nofit_written_at + NOFIT_CONDITION_SECONDS - self.core.clock()
        if wait <= 0:
            self._write_shortfall(state.key)
        elif not self._registry.timers.armed(state.key, Deadline.SHORTFALL):
            # A remembered no-fit is answered without coming here again: the newest text must not
            # wait for another change to reach the condition.
            self._registry.timers.arm(state.key, Deadline.SHORTFALL, wait, self._write_shortfall)

    def _write_shortfall(self, key: str) -> None:
        state = self._registry.gangs.get(key)
        if state is not None:
            self._reported.of(state).nofit_written_at = self.core.clock()
            self.conditions(state)

    def members_changed(self, key: str) -> None:
        """A member of the gang was bound or lost: only the live count can have moved (the other
        conditions follow phase changes, and their messages must not churn with every pod)."""
        state = self._registry.gangs.get(key)
        if state is not None:
            self.conditions(state, only=CONDITION_SATISFIED)

    def conditions(self, state: GangState, only: str = "") -> None:
        """Apply the conditions that changed (native PodGroups only; other gangs have Events);
        with ``only``, just that type is looked at."""
        spec = self.core.cache.gang_spec(state.key)
        home = spec.home if spec is not None else None
        if home is None or not home.conditions or self._held_back(state):
            return
        applied = self._reported.of(state).conditions
        wanted = self._changed(state, applied, only)
        if not wanted:
            return
        sent = self._reported.of(state).sent
        if len(sent) + len(wanted) > _SENT_REMEMBERED:
            sent.clear()
        for c in wanted:
            applied[c.type] = (c.status, c.reason, c.message)
            sent.add((c.type, c.status, c.reason, c.message[:CONDITION_MESSAGE_LIMIT]))
        # Server-side apply owns what it is sent: the whole set goes every time, or the conditions
        # left out would be removed.
        full = [GangCondition(kind, status, reason, message)
                for kind, (status, reason, message) in sorted(applied.items())]
        self.core.spawn(self.core.actions.set_gang_conditions(home, full))
        for part in spec.parts if spec is not None else ():  # a composite's PodGroups show its state
            if part.home is not None:
                self.core.spawn(self.core.actions.set_gang_conditions(part.home, full))

    def _changed(self, state: GangState, applied: Applied, only: str) -> list[GangCondition]:
        """The conditions (of type ``only``, if given) whose value differs from the one applied.

        The message counts too: a condition set while members were still arriving must not keep
        saying so once the gang's reason is that it does not fit."""
        return [c for c in self._wanted(state, applied)
                if (not only or c.type == only) and applied.get(c.type) != (c.status, c.reason, c.message)]

    def _held_back(self, state: GangState) -> bool:
        """A Recovering gang whose report waits out the grace, or that turned out to be going:
        nothing is written to an object about to be deleted with it."""
        if state.phase != Phase.RECOVERING:
            return False
        passing = self._reported.of(state).passing
        return (passing is not None and passing[0] == Phase.RECOVERING) or self._going(state.key)

    def conditions_shown(self, key: str) -> None:
        """The gang's object changed: a condition Quorum applied may show another writer's value.

        With ``GenericWorkload`` on, kube-scheduler's group cycle writes ``PodGroupInitiallyScheduled``
        too, with its own message ("pod group is unschedulable"); as Quorum writes only when its own
        text changes, that would hide the gang's shortfall for good. Quorum's value goes back, at
        most once per ``REASSERT_SECONDS`` a gang: each write makes kube-scheduler retry the group
        and write its own again, and the two would otherwise take turns without end. A value Quorum
        sent itself is the echo of an earlier write (the newer one is on its way) and is left."""
        state = self._registry.gangs.get(key)
        spec = self.core.cache.gang_spec(key)
        if state is None or spec is None or spec.home is None or not spec.home.conditions:
            return
        reported = self._reported.of(state)
        applied = reported.conditions
        replaced = {kind: (status, reason, message) for kind, status, reason, message in spec.shown
                    if kind in applied and (kind, status, reason, message) not in reported.sent
                    and _cut(applied[kind]) != (status, reason, message)}
        if not replaced:
            return
        wait = reported.reasserted_at + REASSERT_SECONDS - self.core.clock()
        if wait > 0:  # the timer looks again then, at the newest object
            self._registry.timers.arm(key, Deadline.REASSERT, wait, self.conditions_shown)
            return
        reported.reasserted_at = self.core.clock()
        applied.update(replaced)  # what the object shows now: Quorum's own value differs from it
        self.conditions(state)

    def _wanted(self, state: GangState, applied: Applied) -> list[GangCondition]:
        text = state.reason or f"gang {state.key}: {state.phase}"
        return (_scheduling_conditions(state, applied, text) + self._satisfied(state, applied)
                + _lifecycle_conditions(state, applied, text))

    def _satisfied(self, state: GangState, applied: Applied) -> list[GangCondition]:
        """Whether ``minCount`` members are scheduled now (bound, not failed, deleted or being
        evicted): shown from the gang's first quorum on, for as long as its PodGroup lives."""
        if not state.started and CONDITION_SATISFIED not in applied:
            return []
        spec = self.core.cache.gang_spec(state.key)
        needed = self.core.min_count(state, spec)
        scheduled = self._registry.running_count(state.key)
        if state.completing:  # a member that finished its work was scheduled: the gang is done, not short
            scheduled += len(state.finished)  # also once its pod is deleted
        met = scheduled >= needed
        return [GangCondition(CONDITION_SATISFIED, met, "MinCountSatisfied" if met else "BelowMinCount",
                              f"{scheduled} of {needed} members scheduled")]


def _scheduling_conditions(state: GangState, applied: Applied, text: str) -> list[GangCondition]:
    """Whether the gang was ever scheduled, and whether its pods are Ready."""
    out: list[GangCondition] = []
    scheduled = applied.get(CONDITION_INITIALLY_SCHEDULED, (False, "", ""))[0]
    if state.started and not scheduled:
        out.append(GangCondition(CONDITION_INITIALLY_SCHEDULED, True, "Scheduled", text))
    elif not scheduled and state.phase in (Phase.PENDING, Phase.BACKOFF, Phase.WAITING_FOR_MEMBERS):
        out.append(GangCondition(CONDITION_INITIALLY_SCHEDULED, False, "Unschedulable", text))
    if state.pods_ready and (state.phase == Phase.BOUND or state.completing):  # finishing: it was Ready
        out.append(GangCondition(CONDITION_PODS_READY, True, "PodsReady", text))
    elif state.started:
        why = "WaitForPodsRecovery" if state.phase == Phase.RECOVERING else "WaitForPodsStart"
        out.append(GangCondition(CONDITION_PODS_READY, False, why, text))
    elif state.phase in (Phase.BACKOFF, Phase.DEACTIVATED) and CONDITION_PODS_READY in applied:
        out.append(GangCondition(CONDITION_PODS_READY, False, "Requeued", text))
    return out


def _lifecycle_conditions(state: GangState, applied: Applied, text: str) -> list[GangCondition]:
    """Started, Recovering and Deactivated: each shown once it has been true."""
    out: list[GangCondition] = []
    if state.members_started or CONDITION_STARTED in applied:
        out.append(GangCondition(CONDITION_STARTED, state.members_started,
                                 "AllMembersStarted" if state.members_started else "NotStarted", text))
    recovering = state.phase == Phase.RECOVERING
    if recovering or CONDITION_RECOVERING in applied:
        out.append(GangCondition(CONDITION_RECOVERING, recovering,
                                 "MembersLost" if recovering else "NotRecovering", text))
    if state.deactivated or CONDITION_DEACTIVATED in applied:
        out.append(GangCondition(CONDITION_DEACTIVATED, bool(state.deactivated),
                                 "RequeueLimitExceeded" if state.deactivated else "Active", text))
    return out


def _cut(value: tuple[bool, str, str]) -> tuple[bool, str, str]:
    """A condition value as the object shows it (a long message is cut when written)."""
    return value[0], value[1], value[2][:CONDITION_MESSAGE_LIMIT]
