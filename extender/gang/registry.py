"""The gang registry: the one owner of what Quorum remembers about each gang.

It alone creates and forgets gangs, moves their phase (telling the observers wired at the
composition root), releases their reservations and arms their deadlines (``timers.py``). Parts
read gangs through it; a part that keeps facts of its own about a gang keeps them in a table the
registry hands out (``table``), so forgetting a gang forgets them too and no table outlives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Set
from typing import Generic, TypeVar

from ..cluster.composites import is_composite_key, quorum_count
from ..cluster.membership import NO_MEMBERS
from ..cluster.records import PodRecord
from .core import Core, alive_count, runs
from .state import (
    Facts,
    GangState,
    Phase,
    clear_reserved,
    derive_phase,
    end_backoff,
    mark_started,
    take_held,
    transition,
)
from .timers import Deadline, GangTimers

# Told of every phase change: (gang, from, to, reason). Events and PodGroup status hang off it.
PhaseObserver = Callable[[GangState, Phase, Phase, str], None]

T = TypeVar("T")


def tally(count: int, needed: int, what: str) -> str:
    """How many members are ``what`` of the ``needed``: one wording for every reason that counts."""
    return f"{count} of {needed} members {what}"


class GangTable(Generic[T]):
    """One part's own facts about each gang, kept only while the registry knows the gang."""

    def __init__(self, registry: GangRegistry, make: Callable[[], T]) -> None:
        self._registry = registry
        self._make = make
        self._rows: dict[str, T] = {}

    def of(self, state: GangState) -> T:
        """The part's facts about this gang (fresh ones the first time). A gang the registry has
        forgotten meanwhile (a task that awaited) gets fresh facts that are not kept: they must
        neither outlive it nor reach a new gang of the same key."""
        if self._registry.gangs.get(state.key) is not state:
            return self._make()
        row = self._rows.get(state.key)
        if row is None:
            row = self._rows[state.key] = self._make()
        return row

    def forget(self, key: str) -> None:
        self._rows.pop(key, None)

    def keys(self) -> Iterator[str]:
        return iter(self._rows)


class GangRegistry:
    """Every gang's state, its phase changes, held binds and deadlines."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._gangs: dict[str, GangState] = {}
        self.timers = GangTimers()
        self._observers: tuple[PhaseObserver, ...] = ()
        self._tables: list[GangTable[object]] = []

    @property
    def gangs(self) -> Mapping[str, GangState]:
        """The gangs by key, read-only: only the registry adds and forgets them."""
        return self._gangs

    def observe(self, *observers: PhaseObserver) -> None:
        """Wire the observers of phase changes, in the order they are told (composition root)."""
        self._observers = observers

    def table(self, make: Callable[[], T]) -> GangTable[T]:
        """A per-gang table for one part, emptied of a gang when the gang is forgotten."""
        table: GangTable[T] = GangTable(self, make)
        self._tables.append(table)  # type: ignore[arg-type]
        return table

    def tables(self) -> tuple[GangTable[object], ...]:
        return tuple(self._tables)

    def check(self) -> list[str]:
        """Violations of the registry's own invariants: no part keeps facts about a gang it forgot,
        and the counts read from member states are the ones walking the members gives."""
        problems = [f"gang {key}: a part keeps facts about it after it was forgotten (a leak)"
                    for table in self._tables for key in table.keys() if key not in self._gangs]
        for key in self._gangs:
            kept = (self._running_total(key), self.ready_count(key),
                    self.core.cache.membership.alive_count(key))
            walked = self._walked_counts(key)
            if kept != walked:
                problems.append(f"gang {key}: (running, Ready, alive) members counted {kept}, "
                                f"walking them gives {walked}")
        return problems

    def _walked_counts(self, key: str) -> tuple[int, int, int]:
        """(running, Ready, alive) by walking the members: the definitions the kept counts follow."""
        evicting = self._evicting(key)
        members, nodes = self.core.cache.members(key), self.core.cache.nodes
        unseen = (m.uid for m in members if not m.node_name)
        running = (sum(1 for m in members if runs(m) and m.uid not in evicting)
                   + self.core.ledger.inflight_of(key, unseen, evicting))
        ready = sum(1 for m in members if runs(m) and m.ready and m.uid not in evicting
                    and (node := nodes.get(m.node_name)) is not None and node.ready)
        return running, ready, alive_count(members)

    def state(self, key: str) -> GangState:
        state = self._gangs.get(key)
        if state is None:
            state = self._gangs[key] = GangState(key, first_seen=self.core.clock())
        return state

    def _evicting(self, key: str) -> Set[str]:
        """Members Quorum is evicting: no longer counted as running, nor as pinning the gang."""
        state = self._gangs.get(key)
        return state.evicting if state is not None else NO_MEMBERS

    def running_count(self, key: str) -> int:
        """Members bound, as the cache sees it plus binds that succeeded but are not seen yet. A
        composite counts in each part no more than its minCount: extras of one part make up for no
        other's, so "running at quorum" means every part is."""
        count = self._running_total(key)
        if count and is_composite_key(key):
            spec = self.core.cache.gang_spec(key)
            if spec is not None and spec.min_parts:
                return quorum_count(spec, self.running_members(key))
        return count

    def _running_total(self, key: str) -> int:
        """Members that run, less those being evicted, plus binds that succeeded unseen: read from
        the cache's member states, not by walking the members (``check`` compares the two)."""
        membership = self.core.cache.membership
        evicting = self._evicting(key)
        bound = membership.running_count(key, evicting)
        return bound + self.core.ledger.inflight_of(key, membership.members_in("unbound", key), evicting)

    def running_members(self, key: str) -> list[PodRecord]:
        """The members ``running_count`` counts (a composite's quorum is counted part by part)."""
        evicting = self._evicting(key)
        ledger = self.core.ledger
        return [m for m in self.core.cache.members(key) if m.uid not in evicting and
                (runs(m) or (not m.node_name and ledger.is_inflight(m.uid)))]

    def running_nodes(self, key: str) -> list[str]:
        """Nodes of the members that run (or whose bind succeeded): they pin the gang's domain.

        A member on its way out (deleted, evicted, its node gone) pins nothing: replacements must
        join the survivors, not the node that failed.
        """
        inflight = self.core.ledger.inflight()
        evicting = self._evicting(key)
        out = []
        for m in self.core.cache.members(key):
            if runs(m) and m.uid not in evicting and m.node_name in self.core.cache.nodes:
                out.append(m.node_name)
            elif m.uid in inflight:
                out.append(inflight[m.uid])
        return out

    def ready_count(self, key: str) -> int:
        """Running members whose Ready condition is True (what the readiness timeout waits for).

        A member on a node that is not Ready does not count, whether or not the node lifecycle
        controller has marked the pod itself not Ready yet.
        """
        evicting = self._evicting(key)
        cache = self.core.cache
        nodes, pods = cache.nodes, cache.pods
        return sum(1 for uid in cache.membership.members_in("ready", key) if uid not in evicting
                   and (node := nodes.get(pods[uid].node_name)) is not None and node.ready)

    def facts(self, state: GangState) -> Facts:
        spec = self.core.cache.gang_spec(state.key)
        valid = spec is not None and not spec.problem and spec.min_count >= 1
        min_count = spec.min_count if spec is not None and valid else max(state.min_count_reserved, 1)
        running = self.running_count(state.key)
        backing_off = state.backoff_until > self.core.clock()
        return Facts(
            spec_valid=valid or spec is None,
            declared=spec is not None,
            alive=self.core.cache.membership.alive_count(state.key),
            running=running,
            min_count=min_count,
            reserved=self.core.ledger.reserved_count(state.key),
            held=len(state.held),
            binding=state.binds_in_flight > 0,
            backing_off=backing_off,
            recovering=self.recovering(state, running, min_count) and not backing_off,
            deactivated=bool(state.deactivated),
        )

    def recovering(self, state: GangState, running: int, min_count: int) -> bool:
        """A gang that ran at quorum and lost members, or (after being Ready) their readiness.

        A gang one of whose members succeeded is finishing: members leaving it are no failure.
        """
        if not state.started or state.completing:
            return False
        if running < min_count:
            return True
        return state.pods_ready and self.ready_count(state.key) < min_count

    def sync(self, state: GangState, reason: str = "") -> Phase:
        """Move the gang to the phase its facts imply (through the checked transition)."""
        facts = self.facts(state)
        target = derive_phase(facts)
        if target == Phase.RECOVERING and not reason:
            # Its reason would otherwise still say what the gang last did ("quorum bound").
            reason = self._recovering_reason(state, facts)
        if target == Phase.BOUND:
            spec = self.core.cache.gang_spec(state.key)
            if spec is None or spec.is_gang:  # a basic PodGroup (minCount 1, met by any pod) never starts
                mark_started(state, True)
            if state.backoff_until:
                # Bound (members bound elsewhere, or minCount lowered): an earlier backoff is moot.
                end_backoff(state)
                self.timers.cancel(state.key, Deadline.BACKOFF)
        source = state.phase
        transition(state, target, reason, strict=self.core.strict, count=self._count)
        if target != source:
            for observer in self._observers:
                observer(state, source, target, state.reason)
        return target

    def _recovering_reason(self, state: GangState, facts: Facts) -> str:
        if facts.running < facts.min_count:
            return f"gang {state.key}: {tally(facts.running, facts.min_count, 'running')}, members lost"
        ready = self.ready_count(state.key)
        return f"gang {state.key}: {tally(ready, facts.min_count, 'Ready')}, readiness lost"

    def release(self, state: GangState, reason: str, metric_reason: str) -> None:
        """Drop the whole reservation and answer every held bind with an error.

        kube-scheduler forgets the assumed pods on that error and requeues them; nothing of the
        gang keeps capacity it may never use.
        """
        freed = self.core.ledger.release_gang(state.key)
        if freed or state.held:
            self.core.metrics.reservation_releases.labels(metric_reason).inc()
        for held in take_held(state):
            if not held.answer.done():
                held.answer.set_result(reason)
        self.timers.cancel(state.key, Deadline.BIND)
        clear_reserved(state, reason)
        if freed:
            self.wake_gangs_that_did_not_fit(exclude=state.key)

    def wake_gangs_that_did_not_fit(self, exclude: str) -> None:
        """Capacity came back without a cluster event: nudge gangs that did not fit."""
        for key, other in self._gangs.items():
            if key != exclude and other.nofit is not None and not self.core.ledger.reserved_count(key):
                self.core.requeue(key, self.core.pending_members(key), "capacity released")

    def forget_if_idle(self, key: str) -> None:
        """Drop a gang's state once nothing refers to it (no members, no PodGroup, nothing held).

        Filter calls may name gangs that do not exist; they must not leave phantom gangs behind.
        """
        state = self._gangs.get(key)
        declared = self.core.cache.declarations.declared_by_object(key)
        if state is None or self.core.cache.gang_members.get(key) or declared:
            return
        if self.core.ledger.reserved_count(key) or state.held or state.binds_in_flight:
            return
        if state.backoff_until > self.core.clock() or state.deactivated:
            # A requeued gang between its evicted members and the owner's replacements: what it
            # must wait for, and its count, outlive the pods.
            return
        self.timers.cancel_all(key)
        del self._gangs[key]
        for table in self._tables:
            table.forget(key)

    def _count(self, source: Phase, target: Phase) -> None:
        self.core.metrics.transitions.labels(str(source), str(target)).inc()
