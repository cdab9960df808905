"""Where the gang is decided.

The coordinator turns the extender calls into all-or-nothing gang scheduling:

- **filter** runs the named gates of ``gates.py``; the first member filtered after quorum exists
  places the *whole* gang (``planning.py``) against free capacity from the ledger, and reserves it.
  From then on every member's filter answers exactly its reserved node.
- **bind** holds each reserved member's call until enough members to reach ``minCount`` are held
  or running, then binds them together (``binding.py``); a gang that misses quorum within the bind
  timeout is released whole and backed off (``retry.py``).
- **cache events** release reservations when a member, node or gang object disappears, and wake
  gangs whose answer may have changed.

Every phase change goes through ``GangRegistry.sync`` and the state machine in ``state.py``. The capacity
arithmetic lives only in ``ledger.py``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from ..cluster.cache import ClusterCache
from ..cluster.cache_events import CacheEvent
from ..cluster.records import GangSpec, PodRecord
from ..config import Config
from ..topology.placement import NoFit, Placement
from ..topology.scoring import ScoreTable
from . import debug, gates, preemption
from .binding import Binder
from .core import BindFailed, ClusterActions, Core
from .displacement import Displacer
from .gates import FilterDecision, GateInput, reject_all
from .invariants import check_invariants
from .ledger import CapacityLedger
from .lifecycle import Lifecycle
from .planning import Planner, honour_nominations
from .provisioning import Provisioner
from .queue import GangQueue
from .reactions import CacheReactions
from .registry import GangRegistry, tally
from .reporting import Reporter
from .retry import RECHECK_DELAY_SECONDS, STALE_ANSWER_WINDOW_SECONDS, Retry
from .scores import Scorer
from .started import StartedSignal
from .state import ClaimEpoch, GangState, Phase, count_replan, see_declaration, set_reason
from .telemetry import GangMetrics

__all__ = ["RECHECK_DELAY_SECONDS", "STALE_ANSWER_WINDOW_SECONDS", "BindFailed", "ClusterActions",
           "Coordinator", "FilterDecision"]

log = logging.getLogger(__name__)


class Coordinator:
    def __init__(self, config: Config, cache: ClusterCache, actions: ClusterActions, metrics: GangMetrics,
                 clock: Callable[[], float] = time.monotonic, strict: bool = False) -> None:
        """The composition root: every part is given what it uses here, and every observer of
        phase changes and of the cache is registered here, in the order they are told."""
        self.cache = cache
        core = self.core = Core(config, cache, CapacityLedger(cache), actions, metrics, clock, strict)
        registry = self.registry = GangRegistry(core)
        claim_epoch = ClaimEpoch()  # the queue moves it, the planner's no-fit memo reads it
        self.binder = Binder(core, registry)
        self.reporter = Reporter(core, registry)
        self.planner = Planner(core, registry, claim_epoch)
        self.retry = Retry(core, registry, self.planner)
        self.lifecycle = Lifecycle(core, registry, self.retry, StartedSignal(core))
        self.displacer = Displacer(core, registry, self.lifecycle)
        self.queue = GangQueue(core, registry, self.displacer if config.preemption.enabled else None,
                               claim_epoch)
        self.scorer = Scorer(core, registry)
        self._offered = preemption.OfferedVictims()  # what /preempt answers let kube-scheduler evict
        self.provisioner = Provisioner(core, registry, self.retry.schedule_recheck, self.reporter.nofit)
        self.reactions = CacheReactions(core, registry, self.binder, self.retry, self.lifecycle,
                                        self.provisioner, self.queue, self._verify,
                                        self.reporter.members_changed, self.reporter.conditions_shown)
        self._verify_each_call = config.check_invariants
        self._gates = (partial(gates.deactivated_gate, core), partial(gates.running_gate, core, registry),
                       partial(gates.already_bound_gate, core), self._reservation_gate,
                       partial(gates.backoff_gate, core, registry))
        core.reporter = self.reporter
        core.earmarks = self.queue
        registry.observe(self.reporter.phase_changed, self.lifecycle.on_phase,
                         self.queue.phase_changed, self.provisioner.on_phase)
        cache.scale_ups.on_change = self.provisioner.on_status
        cache.listeners.append(self.reactions.on_cache_event)

    def on_cache_event(self, event: CacheEvent) -> None:
        """What the cache reports (the reactions part answers it)."""
        self.reactions.on_cache_event(event)

    # ------------------------------------------------------------------ named queries
    def phase_of(self, gang: str) -> Phase | None:
        state = self.registry.gangs.get(gang)
        return None if state is None else state.phase

    def reason_of(self, gang: str) -> str:
        state = self.registry.gangs.get(gang)
        return "" if state is None else state.reason

    def reservation_of(self, gang: str) -> dict[str, str]:
        """Reserved members of the gang, pod uid -> node."""
        return self.core.ledger.reservation_of(gang)

    def held_binds(self, gang: str) -> list[str]:
        """Uids of members whose bind call is being held."""
        state = self.registry.gangs.get(gang)
        return sorted(state.held) if state is not None else []

    def backoff_left(self, gang: str) -> float:
        state = self.registry.gangs.get(gang)
        return 0.0 if state is None else max(0.0, state.backoff_until - self.core.clock())

    def failures_of(self, gang: str) -> int:
        state = self.registry.gangs.get(gang)
        return 0 if state is None else state.failures

    def free_capacity(self, node: str) -> tuple[dict[str, int], int] | None:
        """Free capacity of a node as a pod outside every gang sees it (the ledger's formula)."""
        return self.core.ledger.free(node, None)

    def gangs(self) -> list[str]:
        return sorted(self.registry.gangs)

    def reserved_nodes(self) -> list[str]:
        return self.core.ledger.reserved_nodes()

    def check_invariants(self) -> list[str]:
        """Every invariant violation now (empty when the core is consistent)."""
        return check_invariants(self.core, self.registry, self.retry.parked()) + self.displacer.check()

    def _verify(self, after: str) -> None:
        """With debug.checkInvariants, check the core after every call and log what breaks."""
        if not self._verify_each_call:
            return
        for problem in self.check_invariants():
            self.core.metrics.invariant_violations.inc()
            log.error("invariant violated", extra={"after": after, "problem": problem})

    # ------------------------------------------------------------------ filter
    def filter(self, pod: PodRecord, declared: GangSpec | None, candidates: list[str]) -> FilterDecision:
        known = self.cache.pods.get(pod.uid)
        if known is not None:
            pod = known  # the cache's view of the pod (and of its gang) wins over the request's
        else:
            pod = self.cache.device_accounting.for_request(self.cache.filing.resolve(pod))
            self.binder.note_pod(pod)  # its bind may come before the watch shows it
        key = pod.gang_key
        if key is None:
            return gates.protect_reservations(self.core, pod, candidates, own_gang=None)
        spec = self.cache.gang_spec(key)
        if spec is None and declared is not None and declared.key == key and known is None:
            spec = declared  # kube-scheduler has the pod before our watch delivered it
        decision = gates.declaration_gate(self.core, key, spec, pod, candidates)
        if decision is not None:
            self._note_declaration(key, decision)
            self._note_answer(pod, known is not None, decision)
            return decision
        assert spec is not None  # the declaration gate answered otherwise
        reservation = self.core.ledger.reserved_node(pod.uid)
        if reservation is not None:
            if reservation.gang != key:
                # A pod the watch has not delivered, reserved for one gang, now naming another: the
                # reservation stands (a pod is never reserved by two gangs) and this claim is refused.
                return reject_all(candidates, f"pod {pod.key} is reserved for gang {reservation.gang}, "
                                              f"not {key}")
            if reservation.node in candidates:
                # The common case of a reserved member: its node, with no state to change or sync.
                self.retry.unpark(pod.uid)
                return FilterDecision(candidates, [reservation.node])
        state = self.registry.state(key)
        if spec is self.cache.gang_spec(key):
            if state.spec_seen is None:
                self.lifecycle.adopt(state, spec)  # a requeue count or deactivation from before
            see_declaration(state, spec)
        g = GateInput(pod, spec, state, self.cache.members(key), candidates, known is not None)
        decision = self._run_gates(g)
        self._note_answer(pod, known is not None, decision)
        self.registry.sync(state)
        self.queue.refresh()  # the head of the queue not fitting may make it claim now
        self.registry.forget_if_idle(key)
        self._verify("filter")
        return decision

    def _note_answer(self, pod: PodRecord, known: bool, decision: FilterDecision) -> None:
        """Remember who kube-scheduler will park because of this answer (a pod the cache has not
        seen yet counts as pending)."""
        if decision.rejects_everything and (not known or pod.pending):
            self.retry.park(pod.uid)
        else:
            self.retry.unpark(pod.uid)

    def _note_declaration(self, key: str, decision: FilterDecision) -> None:
        """Misconfigured gangs (and those waiting for their PodGroup) show a phase and reason."""
        if not decision.reason or key not in self.cache.gang_members:
            return
        state = self.registry.state(key)
        reason = decision.reason
        self.registry.sync(state, reason)

    def _run_gates(self, g: GateInput) -> FilterDecision:
        core = self.core
        for gate in self._gates:
            decision = gate(g)
            if decision is not None:
                return decision
        decision = gates.quorum_gate(core, g)
        if decision is not None:
            self.retry.note_rejection(g.state)
            return decision
        decision = gates.reserved_for_others_gate(core, g)
        if decision is not None:
            return decision
        cached = self.planner.memo_answer(g.state, g.candidates)
        if cached is not None:
            self.retry.note_rejection(g.state)
            return reject_all(g.candidates, cached)
        return self.place(g)

    def _reservation_gate(self, g: GateInput) -> FilterDecision | None:
        reservation = self.core.ledger.reserved_node(g.pod.uid)
        if reservation is None or reservation.gang != g.state.key:
            return None
        if reservation.node in g.candidates:
            return FilterDecision(g.candidates, [reservation.node])
        return self._replan(g, reservation.node)

    def place(self, g: GateInput) -> FilterDecision:
        """Place the whole gang against free capacity and reserve it; or say exactly why not."""
        state, spec = g.state, g.spec
        error = self.planner.level_error(spec)
        if error:
            set_reason(state, error)
            return reject_all(g.candidates, error)
        self._repair_partial_gangs(exclude=state.key)
        pending = {m.uid: m for m in g.members if m.pending and not self.core.ledger.is_inflight(m.uid)}
        if g.pod.uid not in pending and not g.known:
            pending[g.pod.uid] = g.pod  # the cache has not seen this pod yet; place it from the request
        bound_nodes = self.registry.running_nodes(state.key)
        result = self._plan_backfill(g, pending, bound_nodes)
        if isinstance(result, NoFit):
            return self._answer_nofit(g, result, pending, bound_nodes)
        self._reserve(state, result, pending, spec.min_count - len(bound_nodes), first_uid=g.pod.uid)
        return FilterDecision(g.candidates, [result.assignment[g.pod.uid]])

    def _plan_backfill(self, g: GateInput, pending: dict[str, PodRecord],
                       bound_nodes: list[str]) -> Placement | NoFit:
        """Plan the gang on the member's candidates (and its mates' nominated or pinned nodes), outside the
        head-of-line claim it must keep off; a no-fit the claim caused says so."""
        state = g.state
        candidates = self.planner.with_mates_nominations(g.candidates, pending, g.pod.uid)
        candidates = self.planner.with_mates_pins(candidates, pending, g.pod.uid)
        widened = candidates is not g.candidates  # by nodes the member itself was not offered
        self.queue.refresh()  # the queue's upkeep before a placement: the claim it must keep off
        claim, candidates = self.queue.outside_claim(state.key, candidates)  # backfill
        result = self.planner.plan(g.spec, pending, candidates, bound_nodes, g.pod.uid)
        if isinstance(result, Placement):
            if widened:
                result = replace(result, assignment=honour_nominations(result.assignment, pending,
                                                                        set(g.candidates), g.pod.uid))
            self.queue.note_blocked(state, "")
            return result
        kept_off = claim is not None and any(n in claim.nodes for n in g.candidates)
        self.queue.note_blocked(state, claim.gang if claim is not None and kept_off else "")
        if claim is not None and kept_off:
            result = NoFit(f"{result.reason}; {claim.reason(self.core.clock())}")
        return result

    def _answer_nofit(self, g: GateInput, result: NoFit, pending: dict[str, PodRecord],
                      bound_nodes: list[str]) -> FilterDecision:
        """Reject the member with why the gang does not fit, after asking the autoscaler for room;
        a recovering gang whose survivors' domain cannot take its replacements starts afresh."""
        state, spec = g.state, g.spec
        asked = self.provisioner.on_nofit(state, spec, list(pending.values()),
                                          spec.min_count - len(bound_nodes))
        if asked:
            result = NoFit(f"{result.reason}; {asked}")
        set_reason(state, self.planner.remember_nofit(state, result, g.candidates))
        self.retry.note_rejection(state)
        if state.started and bound_nodes and (spec.required_topology or spec.slice_topology) and \
                self.lifecycle.replace_outside(spec):
            # Recovery: the survivors' domain (or slice) cannot take the replacements; start afresh.
            self.lifecycle.requeue(state, f"{state.reason}; re-placing the whole gang", "replace",
                                   backoff=False)
            return reject_all(g.candidates, state.reason)
        self.reporter.nofit(state)
        return reject_all(g.candidates, state.reason)

    def _reserve(self, state: GangState, placement: Any, pending: dict[str, PodRecord], needed: int,
                 first_uid: str | None) -> None:
        self.planner.reserve(state, placement, pending, needed)
        set_reason(state, "")
        self.retry.arm_deadline(state, self._deadline_passed)
        self.registry.sync(state, f"gang {state.key}: reserved in {'/'.join(placement.domain) or 'cluster'}")
        # When a member's own filter placed the gang, only members kube-scheduler may have parked:
        # the rest come to filter on their own (a nudge is an apiserver write per member). A gang
        # placed on another's behalf (a repair) wakes all its members: it is rare.
        others = [pending[u] for u in placement.assignment if u != first_uid and u in self.cache.pods
                  and (first_uid is None or self.retry.is_parked(u))]
        self.core.requeue(state.key, others, "placement reserved")

    def _repair_partial_gangs(self, exclude: str) -> None:
        """Reserve first for gangs that run with fewer than minCount members bound.

        A gang ends up partly bound only when binding was cut short (Quorum restarted in the middle
        of a gang's concurrent bind calls, or the apiserver refused one of them). Its bound members
        pin its domain; if another gang were placed there first, the rest could never join. The
        head of the queue's claim still holds: a gang it outranks is completed outside it, as its
        own filter calls would place it.
        """
        for spec, pending, bound_nodes in self.planner.partial_gangs(exclude):
            state = self.registry.state(spec.key)
            by_uid = {m.uid: m for m in pending}
            self.queue.refresh()
            _, nodes = self.queue.outside_claim(spec.key, list(self.cache.nodes))
            result = self.planner.plan(spec, by_uid, nodes, bound_nodes, None)
            if isinstance(result, NoFit):
                self.planner.remember_nofit(state, result, nodes)
                continue
            self._reserve(state, result, by_uid, spec.min_count - len(bound_nodes), first_uid=None)
            log.info("partly bound gang repaired", extra={"gang": spec.key, "bound": len(bound_nodes)})

    def _replan(self, g: GateInput, node: str) -> FilterDecision:
        """kube-scheduler's own filters no longer accept the reserved node: place the gang again."""
        state = g.state
        reason = f"gang {state.key}: reserved node {node} no longer passes the scheduler's filters"
        self.registry.release(state, reason, "replan")
        if count_replan(state, self.core.config.gang.max_replans):
            self.retry.back_off(state, f"{reason} after {self.core.config.gang.max_replans} re-plans")
            return reject_all(g.candidates, f"gang {state.key}: {state.reason}")
        g.members = self.cache.members(state.key)
        return self.place(g)

    def _deadline_passed(self, key: str) -> None:
        state = self.registry.gangs.get(key)
        if state is None:
            return
        if not self.core.ledger.reserved_count(key) or state.binds_in_flight:
            return
        spec = self.cache.gang_spec(key)
        min_count = self.core.min_count(state, spec)
        reached = len(state.held) + self.registry.running_count(key)
        reason = (f"gang {key}: quorum not reached within {self.core.bind_timeout(key):g}s "
                  f"({tally(reached, min_count, 'reached bind')})")
        self.core.metrics.reservation_timeouts.inc()
        self.registry.release(state, reason, "timeout")
        self.retry.back_off(state, reason)

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, pod: PodRecord, candidates: list[str]) -> ScoreTable:
        known = self.cache.pods.get(pod.uid)
        return self.scorer.scores((known or self.cache.filing.resolve(pod)).gang_key)

    # ------------------------------------------------------------------ bind
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        try:
            return await self.binder.bind(namespace, name, uid, node)
        finally:
            self._verify("bind")

    # ------------------------------------------------------------------ preempt
    def preempt(self, pod: PodRecord, victims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        known = self.cache.pods.get(pod.uid)
        try:
            return preemption.gang_aware(self.core, self.registry, self.queue,
                                         known or self.cache.filing.resolve(pod), victims,
                                         self.retry.note_preemption_refused, self._offered)
        finally:
            self._verify("preempt")

    # ------------------------------------------------------------------ introspection
    def phase_counts(self) -> dict[str, int]:
        return debug.phase_counts(self.registry)

    def reserved_count(self) -> dict[str, int]:
        return {"": self.core.ledger.reserved_pods()}

    def queue_counts(self) -> dict[str, int]:
        return {"waiting": len(self.queue.order()), "claims": int(self.queue.claim is not None),
                "claimed_nodes": self.queue.claimed_nodes()}

    def inflight_snapshot(self) -> dict[str, str]:
        return debug.inflight(self.core)

    def snapshot(self) -> list[dict[str, Any]]:
        return debug.gangs(self.core, self.registry)

    def debug_document(self) -> dict[str, Any]:
        return debug.document(self.core, self.registry)
