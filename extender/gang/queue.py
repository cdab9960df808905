"""Which gang waits first, and the claim that keeps the first from waiting for ever.

**Order.** Gangs waiting for capacity (phase Pending: quorum exists, not placed) are ordered by
priority, highest first, then by when they started waiting (the first time their quorum existed,
kept across a bind-timeout backoff, new after a requeue), then by name. The priority is the
PodGroup's ``spec.priority`` when set, else the highest priority among the gang's pods (admission
resolves ``priorityClassName`` into the pod's ``spec.priority``).

**Claim.** Without more, whichever pods kube-scheduler happens to try first take capacity as it
frees, so a large gang can wait for ever behind a stream of small ones. So the head of the queue,
once it does not fit and has waited ``starvation.claimAfterSeconds`` (at once when its priority is
above every other waiting gang's and ``claimOnPriority`` is set), earmarks the domain where it could
fit soonest (``topology.claims.choose_claim``). Lower-ordered gangs and plain pods of lower or equal
priority are kept off those nodes; nothing running is disturbed, so the domain fills up as its pods
finish. Work that fits elsewhere schedules as usual (backfill). One claim exists at a time; it goes
when its gang reserves, backs off, is deleted, or stops being the head.
"""

from __future__ import annotations

import asyncio
import logging

from ..topology.apart import Apart, resolve_apart
from ..topology.claims import ClaimDomain, choose_claim, copies, envelope
from ..topology.placement import Member
from .core import Core, gang_priority
from .displacement import Displacer
from .registry import GangRegistry
from .state import Claim, ClaimEpoch, GangState, Phase, Waiting

log = logging.getLogger(__name__)

IMPOSSIBLE_RECHECK_SECONDS = 30.0  # a gang no domain could hold is looked at again this often
# A claim whose domain has had room for its gang this long without the gang taking it is given up:
# kube-scheduler is not placing the gang there (node affinity, taints: what Quorum does not model),
# and holding the domain would only starve everything else. The gang claims nothing for a while.
UNUSED_CLAIM_SECONDS = 60.0
UNUSED_CLAIM_PAUSE_SECONDS = 300.0


class GangQueue:
    def __init__(self, core: Core, registry: GangRegistry, displacer: Displacer | None,
                 epoch: ClaimEpoch) -> None:
        self.core = core
        self.registry = registry
        self.displacer = displacer  # whole-gang preemption, when configured
        self._waiting = registry.table(Waiting)
        self.claim: Claim | None = None
        self._epoch = epoch
        self._order: list[str] = []
        self._priority: dict[str, int] = {}
        self._dirty = True
        self._soon = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0
        self._impossible: dict[str, float] = {}  # gang -> when no domain could hold it
        self._unused: dict[str, float] = {}  # gang -> when it left a claim unused
        self._room_since = 0.0  # since when the claimed domain has had room for its gang (0: no room)
        self._room_checked = (-1, -1, -1)  # capacity, reservation and in-flight versions checked

    # ------------------------------------------------------------------ order
    def priority_of(self, key: str) -> int:
        return gang_priority(self.core.cache, key)

    def order(self) -> list[str]:
        """Waiting gangs, first first."""
        self._reorder()
        return self._order

    def position(self, key: str) -> int | None:
        """1-based place in the queue, or None for a gang that is not waiting."""
        return self.order().index(key) + 1 if key in self.order() else None

    def _reorder(self) -> None:
        if not self._dirty:
            return
        waiting = [s for s in self.registry.gangs.values() if s.phase == Phase.PENDING and self._since(s)]
        self._priority = {s.key: self.priority_of(s.key) for s in waiting}
        waiting.sort(key=lambda s: (-self._priority[s.key], self._since(s), s.key))
        self._order = [s.key for s in waiting]
        self._dirty = False
        for memo in (self._impossible, self._unused):
            for key in [k for k in memo if k not in self._priority]:
                del memo[key]

    def _since(self, state: GangState) -> float:
        return self._waiting.of(state).since

    def phase_changed(self, state: GangState, source: Phase, target: Phase, reason: str) -> None:
        waiting = self._waiting.of(state)
        if target == Phase.PENDING and not waiting.since:
            waiting.since = self.core.clock()
        elif target == Phase.BOUND:
            waiting.since = 0.0  # it ran: waiting again later (after a requeue) is a new arrival
        if target != Phase.PENDING:
            waiting.blocked_by = ""
        self._dirty = True
        if self.claim is not None and self.claim.gang == state.key and target != Phase.PENDING:
            self._release(f"gang {state.key} is {target}")
        self._refresh_soon()

    def note_blocked(self, state: GangState, by: str) -> None:
        """The claim that kept the gang from a placement last time ("" when none did)."""
        self._waiting.of(state).blocked_by = by

    # ------------------------------------------------------------------ the claim
    def blocking(self, gang: str | None, priority: int) -> Claim | None:
        """The claim a pod must keep off: not its own gang's, not when it ranks above the holder,
        and never for a gang that already ran (its replacements rejoin it).

        A read: it answers from the claim as it stands. Making and releasing claims (requeues,
        Events, evictions) is ``refresh``'s work, run by a gang's filter call, a cache event or the
        queue's timer, never by a question."""
        claim = self.claim
        if claim is None or gang == claim.gang or priority > claim.priority:
            return None
        if gang is not None:
            state = self.registry.gangs.get(gang)
            if state is not None and state.started:
                return None
        return claim

    def outside_claim(self, gang: str, candidates: list[str]) -> tuple[Claim | None, list[str]]:
        """The claim the gang must keep off (None when none) and the candidates outside it: what a
        gang the claim outranks may use (backfill), whether its own member asks or it is repaired.
        A read, like ``blocking``."""
        claim = self.blocking(gang, self.priority_of(gang))
        return claim, candidates if claim is None else [n for n in candidates if n not in claim.nodes]

    def refresh(self) -> None:
        """Bring the order and the claim up to date (cheap when nothing changed): the queue's
        upkeep, which may make or release a claim (nudging members, writing Events) and start a
        displacement (evictions)."""
        self._soon = False
        head = self._settle_claim()
        if self.claim is not None or head is None or not self.core.config.starvation.enabled:
            return
        state = self.registry.gangs[head]
        if self.displacer is not None and state.nofit is not None and self._displace(state):
            return
        self._claim_when_due(head, state)

    def _settle_claim(self) -> str | None:
        """Release the claim if its gang is gone, is no longer first or left it unused; let a claim
        still waiting for capacity preempt for its gang. The head of the queue (None: none)."""
        if self.claim is not None and self.claim.gang not in self.registry.gangs:
            self._release(f"gang {self.claim.gang} is gone")
        self._reorder()
        head = self._head()
        if self.claim is not None and self.claim.gang != head:
            self._release(f"gang {head} is now first in the queue" if head else "no gang waits")
        if self.claim is not None and self._check_unused(self.claim):
            head = self._head()
        if head is not None and self.claim is not None and self.claim.gang == head and \
                self.displacer is not None and self.registry.gangs[head].nofit is not None:
            self._displace(self.registry.gangs[head])  # a claim waiting for capacity may preempt for it
        return head

    def _claim_when_due(self, head: str, state: GangState) -> None:
        """Claim for the head now if it has waited long enough (or outranks every other waiting
        gang and does not fit), else arm the timer for when it will have."""
        core = self.core
        settings = core.config.starvation
        due = self._since(state) + settings.claim_after_seconds
        now = core.clock()
        # Priority claims at once, but only a gang known not to fit (one that fits is about to be
        # placed). Waiting long enough claims regardless: kube-scheduler's own filters may reject
        # every node for it (none free) without ever asking Quorum.
        at_once = settings.claim_on_priority and state.nofit is not None and self._outranks_all(head)
        if now < due and not at_once:
            self._arm(due - now)
            return
        self._make(state)

    def _head(self) -> str | None:
        """The first waiting gang that may claim: not one no domain could hold, nor one that just
        left a claim unused."""
        now = self.core.clock()
        for key in self._order:
            left = self._paused_for(key, now)
            if left > 0:
                self._arm(left)  # it may claim again then, whether or not anything else happens
                continue
            return key
        return None

    def _paused_for(self, key: str, now: float) -> float:
        """Seconds the gang is still kept from claiming (0: it may claim)."""
        left = 0.0
        since = self._impossible.get(key)
        if since is not None:
            left = max(left, IMPOSSIBLE_RECHECK_SECONDS - (now - since))
        since = self._unused.get(key)
        if since is not None:
            left = max(left, UNUSED_CLAIM_PAUSE_SECONDS - (now - since))
        return left

    def _check_unused(self, claim: Claim) -> bool:
        """Give up a claim whose domain has had room for its gang for a while, unused (True)."""
        core, ledger = self.core, self.core.ledger
        versions = (core.cache.capacity_version, ledger.reservation_version, ledger.inflight_version)
        now = core.clock()
        if versions != self._room_checked:
            self._room_checked = versions
            cap = claim.per_node or 1 << 30  # members that repel use one slot per node at most
            room = sum(min(copies(free[0], free[1], claim.envelope), cap) for name in claim.nodes
                       if (free := ledger.free(name, claim.gang)) is not None)
            if room < claim.needed:
                self._room_since = 0.0
            elif not self._room_since:
                self._room_since = now
        if self._room_since and now - self._room_since < UNUSED_CLAIM_SECONDS:
            self._arm(self._room_since + UNUSED_CLAIM_SECONDS - now)  # given up then if still unused
        if self._room_since and now - self._room_since >= UNUSED_CLAIM_SECONDS:
            self._unused[claim.gang] = now
            self._dirty = True
            state = self.registry.gangs.get(claim.gang)
            if state is not None:
                core.note(state, "ClaimUnused",
                          f"gang {claim.gang}: {claim.level} {claim.domain} had room for it for "
                          f"{UNUSED_CLAIM_SECONDS:.0f}s and kube-scheduler did not place it there; "
                          f"the claim is given up for {UNUSED_CLAIM_PAUSE_SECONDS:.0f}s")
            self._release("unused")
            return True
        return False

    def _outranks_all(self, head: str) -> bool:
        others = [self._priority[k] for k in self._order if k != head]
        return self._priority[head] > (max(others) if others else 0)

    def displace(self, key: str, fresh: bool = False) -> frozenset[str]:
        """kube-scheduler found no node for a member of ``key``: if the gang is first in the queue,
        let it preempt. The victims being displaced for it (empty: none)."""
        if self.displacer is None:
            return frozenset()
        self._dirty = True
        self._reorder()
        state = self.registry.gangs.get(key)
        if state is not None and self._head() == key:
            self._displace(state, fresh)
        return self.displacer.victims_for(key)

    def _displace(self, state: GangState, fresh: bool = False) -> bool:
        """Start a displacement for the gang; True when one started (its domain is then claimed)."""
        assert self.displacer is not None
        plan = self.displacer.consider(state, fresh)
        if plan is None:
            return False
        if self.claim is not None:
            self._release(f"gang {state.key} preempts in {'/'.join(plan.domain)}")
        self._claim(state, ClaimDomain(plan.level, plan.domain, plan.nodes, 0), *self._members(state))
        return True

    def _members(self, state: GangState) -> tuple[list[Member], Apart | None]:
        cache, key = self.core.cache, state.key
        spec = cache.gang_spec(key)
        pending = sorted((m for m in cache.members(key) if m.pending), key=lambda m: m.name)
        needed = max(1, (spec.min_count if spec else 1) - self.registry.running_count(key))
        apart = resolve_apart(pending, cache.level_labels, self.registry.running_nodes(key), cache.nodes)
        return [Member(m.uid, m.requests) for m in pending[:needed]], apart  # apart: members that repel

    def _make(self, state: GangState) -> None:
        core = self.core
        spec = core.cache.gang_spec(state.key)
        if spec is None:
            return
        members, apart = self._members(state)
        required = core.config.level_index(spec.required_topology) if spec.required_topology else None
        choice = choose_claim(core.ledger.claim_nodes(state.key), members, len(core.config.levels),
                              required, apart)
        if choice is None:
            self._impossible[state.key] = core.clock()
            self._dirty = True
            log.info("no domain could hold the gang; no claim", extra={"gang": state.key})
            return
        self._impossible.pop(state.key, None)
        self._claim(state, choice, members, apart)

    def _claim(self, state: GangState, choice: ClaimDomain, members: list[Member],
               apart: Apart | None) -> None:
        core = self.core
        pending = [m for m in core.cache.members(state.key) if m.pending]
        nodes = frozenset(choice.nodes)
        holders = {g for n in nodes for g in core.ledger.gangs_on(n)} - {state.key}
        level = core.config.levels[choice.level].name
        self.claim = Claim(state.key, self._priority.get(state.key, 0), core.clock(), self._since(state),
                           level, "/".join(choice.domain), nodes, choice.missing, frozenset(holders),
                           envelope(members), len(members), 1 if apart is not None else None)
        self._room_since, self._room_checked = 0.0, (-1, -1, -1)
        self._epoch.value += 1
        core.metrics.claims.labels("made").inc()
        note = (f"earmarked {level} {self.claim.domain} ({len(nodes)} nodes; capacity for "
                f"{choice.missing} of {len(members)} members still in use there)")
        log.info("claim made", extra={"gang": state.key, "topologyLevel": level, "domain": self.claim.domain,
                                      "nodes": len(nodes), "missing": choice.missing})
        core.note(state, "Claimed", f"gang {state.key}: {note}")
        core.requeue(state.key, pending, "capacity earmarked")  # it may fit there already

    def _release(self, why: str) -> None:
        claim, self.claim = self.claim, None
        if claim is None:
            return
        self._epoch.value += 1
        self.core.metrics.claims.labels("released").inc()
        log.info("claim released", extra={"gang": claim.gang, "domain": claim.domain, "why": why})
        # Gangs kept off the domain may fit now; plain pods retry on the cluster events that follow.
        self.registry.wake_gangs_that_did_not_fit(exclude=claim.gang)

    # ------------------------------------------------------------------ scheduling of refreshes
    def _refresh_soon(self) -> None:
        if self._soon:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): the next filter refreshes
        self._soon = True
        loop.call_soon(self.refresh)

    def _arm(self, delay: float) -> None:
        """Run ``refresh`` in ``delay`` seconds; the earliest of the moments asked for wins (the
        refresh then arms the next one)."""
        due = self.core.clock() + delay
        if self._timer is not None:
            if due > self._timer_due - 0.5:
                return  # already armed for that moment or an earlier one
            self._timer.cancel()
            self._timer = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer_due = due
        self._timer = loop.call_later(max(delay, 0.0) + 0.01, self._due)

    def _due(self) -> None:
        self._timer = None
        self.tick()

    def tick(self) -> None:
        """The queue's timer: what is due by the clock (a claim delay, an unused claim) is done now."""
        self._dirty = True
        self.refresh()

    def upkeep(self) -> None:
        """``refresh`` after a cache event, when there is a loop to send its writes on (a cache
        filled before serving has answered nothing yet)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.refresh()

    # ------------------------------------------------------------------ checks and views
    def check(self) -> list[str]:
        """No claim without a waiting gang; claimed nodes reserved only by the holder, gangs that
        were there first, gangs that already ran, or gangs that rank above it."""
        claim = self.claim
        if claim is None:
            return []
        state = self.registry.gangs.get(claim.gang)
        if state is None or state.phase != Phase.PENDING:
            phase = state.phase if state is not None else "gone"
            return [f"claim held by gang {claim.gang}, which is not waiting ({phase})"]
        problems = []
        for node in sorted(claim.nodes):
            for gang in self.core.ledger.gangs_on(node):
                other = self.registry.gangs.get(gang)
                exempt = gang in (claim.gang, *claim.grandfathered) or (other is not None and other.started)
                if not exempt and self.priority_of(gang) <= claim.priority:
                    problems.append(f"node {node}: earmarked for gang {claim.gang} but reserved by {gang}")
        return problems

    def view(self, key: str) -> dict[str, object]:
        """What /debug/gangs says of a gang's place in the queue."""
        state = self.registry.gangs.get(key)
        position = self.position(key)
        now = self.core.clock()
        out: dict[str, object] = {"priority": self.priority_of(key), "queuePosition": position}
        if state is not None and position is not None:
            out["waitingSeconds"] = round(now - self._since(state), 1)
            if blocked_by := self._waiting.of(state).blocked_by:
                out["blockedBy"] = blocked_by
        claim = self.claim
        if claim is not None and claim.gang == key:
            out["claim"] = {"level": claim.level, "domain": claim.domain, "nodes": len(claim.nodes),
                            "missingAtClaim": claim.missing, "ageSeconds": round(now - claim.made_at, 1)}
        return out

    def document(self) -> dict[str, object] | None:
        claim = self.claim
        if claim is None:
            return None
        return {"gang": claim.gang, "priority": claim.priority, "level": claim.level, "domain": claim.domain,
                "nodes": sorted(claim.nodes), "reason": claim.reason(self.core.clock())}

    def claimed_nodes(self) -> int:
        return len(self.claim.nodes) if self.claim is not None else 0

