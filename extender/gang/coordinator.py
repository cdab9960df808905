"""Where the gang is decided.

The coordinator turns the three extender calls into all-or-nothing gang scheduling:

- **filter**: a member is rejected until its gang has ``minCount`` pods (quorum gate); the first
  member filtered after that places the *whole* gang at once (``placement.place_gang``) against
  free capacity minus other gangs' reservations, and the gang reserves that placement. From then on
  every member's filter answers exactly its reserved node. If the gang does not fit, nothing is
  reserved and every member is told the exact shortfall.
- **bind**: a reserved member's bind call is *held* until enough members to reach ``minCount``
  are held (or already bound); then all held members are bound concurrently and every held call
  is answered. A gang that does not reach quorum within the bind timeout is released whole and
  backed off exponentially.
- **cache events** release reservations when a member, node or gang object disappears.

All state lives here and is only touched from the event loop, so no locks are needed: every
method that changes state runs to completion without awaiting in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cluster.cache import (
    CAPACITY_FREED,
    GANG_CHANGED,
    GANG_REMOVED,
    MEMBER_READY,
    NODE_REMOVED,
    POD_BOUND,
    POD_REMOVED,
    CacheEvent,
    ClusterCache,
)
from ..cluster.records import GangSpec, PodRecord
from ..cluster.resources import Resources, add_into, subtract_into
from ..config import Config
from ..metrics import Metrics
from ..topology.placement import CandidateNode, Member, NoFit, Placement, fits, format_resources, place_gang
from ..topology.scoring import ScoreTable, distance_scores, occupancy_score

log = logging.getLogger(__name__)


class BindFailed(Exception):
    """The apiserver refused a binding."""


class ClusterActions(Protocol):
    """Side effects the coordinator needs; implemented by ``kube.KubeClient``."""

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def requeue_pods(self, pods: list[PodRecord], reason: str) -> None: ...



@dataclass(slots=True)
class FilterDecision:
    passing: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class HeldBind:
    pod: PodRecord
    node: str
    answer: asyncio.Future[str]


@dataclass(slots=True)
class GangState:
    key: str
    first_seen: float
    reservation: dict[str, str] = field(default_factory=dict)  # pod uid -> node (members not yet bound)
    reserved_requests: dict[str, Resources] = field(default_factory=dict)
    domain: tuple[str, ...] = ()
    held: dict[str, HeldBind] = field(default_factory=dict)
    deadline: asyncio.TimerHandle | None = None
    backoff_until: float = 0.0
    backoff_timer: asyncio.TimerHandle | None = None
    failures: int = 0
    replans: int = 0
    last_reason: str = ""
    nofit_version: tuple[int, ...] = ()
    nofit_candidates: tuple[int, int] = (0, 0)  # which nodes kube-scheduler offered for that no-fit
    quorum_reached: bool = False
    min_count_reserved: int = 0
    # When a member was last told "not enough members" or "does not fit": if the cache changes in a
    # way that could alter that answer soon after, the answer may have come from a lagging watch.
    rejected_at: float = 0.0


# Phases shown on /debug/gangs and in the quorum_gangs metric.
WAITING_FOR_MEMBERS = "WaitingForMembers"
PENDING = "Pending"
RESERVED = "Reserved"
BINDING = "Binding"
BOUND = "Bound"
BACKOFF = "Backoff"
MISCONFIGURED = "Misconfigured"
PHASES = (WAITING_FOR_MEMBERS, PENDING, RESERVED, BINDING, BOUND, BACKOFF, MISCONFIGURED)

# kube-scheduler retries a rejected pod on the cluster event that could help it (a pod deleted, a
# node added), but it may see that event before Quorum's own watch does, and then gets an answer
# from the old state. Gangs rejected this recently before such a change are asked to try again.
STALE_ANSWER_WINDOW_SECONDS = 10.0
# Changes arrive in bursts (a Job's pods deleted together); one re-check per burst is enough.
RECHECK_DELAY_SECONDS = 0.2


class Coordinator:
    def __init__(
        self,
        config: Config,
        cache: ClusterCache,
        actions: ClusterActions,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.cache = cache
        self.actions = actions
        self.metrics = metrics
        self.clock = clock
        self.level_names = tuple(level.name for level in config.levels)
        self.gangs: dict[str, GangState] = {}
        # Capacity set aside for reserved members that are not bound yet: node -> gang -> requests.
        self.reserved_on_node: dict[str, dict[str, Resources]] = {}
        self.reserved_slots: dict[str, dict[str, int]] = {}  # node -> gang -> reserved pod count
        self.reserved_uid: dict[str, str] = {}  # pod uid -> gang key
        self.reservation_version = 0
        # Pods bound by us that the cache has not seen bound yet: counted as used meanwhile.
        self.inflight: dict[str, str] = {}  # pod uid -> node
        self.inflight_on_node: dict[str, dict[str, Resources]] = {}  # node -> uid -> requests
        self._inflight_version = 0
        # Free capacity of each reserved node as pods outside its gangs see it, with the reason to
        # give when a pod does not fit; rebuilt only when capacity, reservations or binds move.
        self._protected_key: tuple[int, int, int] = (-1, -1, -1)
        self._protected: dict[str, tuple[Resources, int, str, tuple[str, ...]]] = {}
        self._occupancy_epoch = -1
        self._occupancy_scores: dict[str, int] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._recheck: asyncio.TimerHandle | None = None
        self._last_rejection = 0.0  # latest GangState.rejected_at over all gangs
        cache.listeners.append(self.on_cache_event)

    # ------------------------------------------------------------------ helpers
    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def _state(self, key: str) -> GangState:
        state = self.gangs.get(key)
        if state is None:
            state = self.gangs[key] = GangState(key, first_seen=self.clock())
        return state

    def spec_for(self, declared: GangSpec | None, key: str) -> GangSpec | None:
        spec = self.cache.gang_spec(key)
        if spec is None and declared is not None and declared.key == key:
            spec = declared  # a pod the watch has not delivered yet
        return spec

    def _level(self, ref: str | None) -> int | None:
        return None if ref is None else self.config.level_index(ref)

    def _free(self, node_name: str, exclude_gang: str | None) -> tuple[Resources, int] | None:
        node = self.cache.nodes.get(node_name)
        if node is None:
            return None
        free, pods_free = self.cache.free_on(node)
        reserved = self.reserved_on_node.get(node_name)
        inflight = self.inflight_on_node.get(node_name)
        if not reserved and not inflight:
            return free, pods_free  # shared, read-only: the common case copies nothing
        free = dict(free)
        if reserved:
            slots = self.reserved_slots[node_name]
            for gang, amount in reserved.items():
                if gang != exclude_gang:
                    subtract_into(free, amount)
                    pods_free -= slots.get(gang, 0)
        if inflight:
            for requests in inflight.values():
                subtract_into(free, requests)
            pods_free -= len(inflight)
        return free, pods_free

    def _mark_inflight(self, uid: str, node: str, requests: Resources) -> None:
        record = self.cache.pods.get(uid)
        if record is not None and record.node_name:
            return  # the cache already counts it
        self.inflight[uid] = node
        self.inflight_on_node.setdefault(node, {})[uid] = requests
        self._inflight_version += 1

    def _clear_inflight(self, uid: str) -> None:
        node = self.inflight.pop(uid, None)
        if node is not None:
            self._inflight_version += 1
            per_node = self.inflight_on_node.get(node, {})
            per_node.pop(uid, None)
            if not per_node:
                self.inflight_on_node.pop(node, None)

    def _reservation(self, key: str) -> dict[str, str]:
        state = self.gangs.get(key)
        return state.reservation if state else {}

    # ------------------------------------------------------------------ reservations
    def _reserve(self, state: GangState, placement: Placement, members: Mapping[str, PodRecord]) -> None:
        for uid, node in placement.assignment.items():
            requests = members[uid].requests
            state.reservation[uid] = node
            state.reserved_requests[uid] = requests
            add_into(self.reserved_on_node.setdefault(node, {}).setdefault(state.key, {}), requests)
            slots = self.reserved_slots.setdefault(node, {})
            slots[state.key] = slots.get(state.key, 0) + 1
            self.reserved_uid[uid] = state.key
        state.domain = placement.domain
        self.reservation_version += 1

    def _unreserve_member(self, state: GangState, uid: str) -> None:
        node = state.reservation.pop(uid, None)
        requests = state.reserved_requests.pop(uid, {})
        self.reserved_uid.pop(uid, None)
        if node is None:
            return
        self.reservation_version += 1
        slots = self.reserved_slots.get(node, {})
        left = slots.get(state.key, 0) - 1
        per_gang = self.reserved_on_node.get(node, {})
        if left > 0:
            slots[state.key] = left
            subtract_into(per_gang.setdefault(state.key, {}), requests)
        else:
            slots.pop(state.key, None)
            per_gang.pop(state.key, None)
        if not slots:
            self.reserved_slots.pop(node, None)
            self.reserved_on_node.pop(node, None)

    def _release(self, state: GangState, reason: str, metric_reason: str) -> None:
        """Drop the whole reservation and answer every held bind with an error."""
        freed = bool(state.reservation)
        if state.reservation or state.held:
            self.metrics.reservation_releases.labels(metric_reason).inc()
        for uid in list(state.reservation):
            self._unreserve_member(state, uid)
        for held in state.held.values():
            if not held.answer.done():
                held.answer.set_result(reason)
        state.held.clear()
        if state.deadline is not None:
            state.deadline.cancel()
            state.deadline = None
        state.domain = ()
        state.min_count_reserved = 0
        state.last_reason = reason
        if freed:
            self._requeue_waiting_for_capacity(exclude=state.key)

    def _requeue_waiting_for_capacity(self, exclude: str) -> None:
        """Capacity came back without a cluster event: wake gangs that did not fit."""
        for key, other in self.gangs.items():
            if key != exclude and other.nofit_version and not other.reservation:
                self._requeue(key, [p for p in self.cache.members(key) if p.pending], "capacity released")

    def _back_off(self, state: GangState, reason: str) -> None:
        state.failures += 1
        timings = self.config.gang
        delay = min(timings.backoff_base_seconds * 2 ** (state.failures - 1), timings.backoff_max_seconds)
        state.backoff_until = self.clock() + delay
        state.last_reason = f"{reason}; backing off {delay:g}s"
        self.metrics.backoffs.inc()
        if state.backoff_timer is not None:
            state.backoff_timer.cancel()
        state.backoff_timer = self._loop().call_later(delay, self._backoff_over, state.key)
        log.info("gang backoff", extra={"gang": state.key, "seconds": delay, "reason": reason})

    def _backoff_over(self, key: str) -> None:
        state = self.gangs.get(key)
        if state is None:
            return
        state.backoff_timer = None
        state.backoff_until = 0.0
        self._requeue(key, [p for p in self.cache.members(key) if p.pending], "backoff over")

    def _requeue(self, key: str, pods: list[PodRecord], reason: str) -> None:
        """Nudge kube-scheduler to retry members now: our state changed without a cluster event."""
        if pods:
            self._spawn(self.actions.requeue_pods(pods, f"gang {key}: {reason}"))

    # ------------------------------------------------------------------ filter
    def filter(self, pod: PodRecord, declared: GangSpec | None, candidates: list[str]) -> FilterDecision:
        key = pod.gang_key
        if key is None:
            return self._filter_outside_gang(pod, candidates, own_gang=None)
        spec = self.spec_for(declared, key)
        if spec is None:
            return _reject_all(candidates, f"gang {key}: waiting for its PodGroup to exist")
        if spec.min_count < 1:
            return _reject_all(candidates, f"gang {key}: invalid min count {spec.min_count} ({spec.source})")
        if not spec.is_gang:
            return self._filter_outside_gang(pod, candidates, own_gang=key)
        uid = pod.uid
        state = self._state(key)

        members = self.cache.members(key)
        bound = [m for m in members if m.holds_capacity]
        if (state.quorum_reached and not bound and not state.held and not state.reservation
                and not any(m.uid in self.inflight for m in members)):
            state.quorum_reached = False  # the previous run finished; this is a new attempt
        if len(bound) >= spec.min_count or (state.quorum_reached and uid not in state.reservation):
            # Quorum is already running: extra members schedule normally, away from reservations.
            return self._filter_outside_gang(pod, candidates, own_gang=key)

        if uid in state.reservation:
            node = state.reservation[uid]
            if node in candidates:
                return FilterDecision([node])
            return self._replan(state, spec, pod, candidates, node)

        now = self.clock()
        if state.backoff_until > now:
            wait = state.backoff_until - now
            return _reject_all(candidates, f"gang {key}: {state.last_reason} ({wait:.0f}s left)")

        alive = _alive(members)
        if uid not in self.cache.pods:
            alive += 1  # kube-scheduler saw this pod before our watch did; it is pending by definition
        if alive < spec.min_count:
            missing = spec.min_count - alive
            gated = sum(1 for m in members if m.gated and not m.terminal and not m.deleting)
            held_back = f" ({gated} held by scheduling gates)" if gated else ""
            self._note_rejection(state, now)
            return _reject_all(
                candidates,
                f"gang {key}: {alive}/{spec.min_count} pods exist{held_back}, waiting for {missing}",
            )
        if state.reservation:
            # Reservation exists but this member is not in it (it appeared afterwards, before quorum):
            # wait for the reserved members; it becomes an extra once they are bound.
            return _reject_all(
                candidates, f"gang {key}: reserved for other members, waiting for them to bind"
            )
        if (state.nofit_version == self._fit_version(key) and state.last_reason
                and state.nofit_candidates == _fingerprint(candidates)):
            self._note_rejection(state, now)
            return _reject_all(candidates, state.last_reason)
        decision = self._place(state, spec, pod, candidates, members, bound)
        if not decision.passing and state.nofit_version:  # a no-fit, not a misconfiguration
            self._note_rejection(state, now)
        return decision

    def _fit_version(self, key: str) -> tuple[int, ...]:
        """Moves whenever capacity, reservations or the gang's own demand change; a cached no-fit
        stays valid until then (status updates of rejected pods do not invalidate it)."""
        spec = self.cache.gang_spec(key)
        pending = sum(1 for m in self.cache.members(key) if m.pending)
        return (self.cache.capacity_version, self.reservation_version, pending,
                spec.min_count if spec else 0)

    def _candidates(self, names: Iterable[str], exclude_gang: str,
                    within: tuple[int, str] | None) -> list[CandidateNode]:
        out: list[CandidateNode] = []
        nodes = self.cache.nodes
        for name in names:
            node = nodes.get(name)
            if node is None:
                continue
            if within is not None and node.paths[within[0]] != within[1]:
                continue
            free = self._free(name, exclude_gang)
            if free is None:
                continue
            out.append(CandidateNode(name, node.domains, free[0], free[1]))
        return out

    def _place(
        self,
        state: GangState,
        spec: GangSpec,
        pod: PodRecord,
        candidates: list[str],
        members: list[PodRecord],
        bound: list[PodRecord],
    ) -> FilterDecision:
        uid = pod.uid
        pending = {m.uid: m for m in members if m.pending}
        if uid not in pending:
            pending[uid] = pod  # the cache has not seen this pod yet; place it from the request
        if spec.required_topology and self._level(spec.required_topology) is None:
            return _reject_all(
                candidates,
                f"gang {state.key}: required topology {spec.required_topology!r} is not a configured level "
                f"({', '.join(self.level_names)})",
            )
        self._repair_partial_gangs(exclude=state.key)
        result = self._plan_and_reserve(state, spec, pending, candidates, bound, first_uid=uid)
        if isinstance(result, NoFit):
            return _reject_all(candidates, state.last_reason)
        return FilterDecision([result.assignment[uid]])

    def _plan_and_reserve(
        self,
        state: GangState,
        spec: GangSpec,
        pending: dict[str, PodRecord],
        candidates: list[str],
        bound: list[PodRecord],
        first_uid: str | None,
    ) -> Placement | NoFit:
        """Place the gang's pending members (all of them, else just enough for quorum) and reserve."""
        required = self._level(spec.required_topology)
        preferred = self._level(spec.preferred_topology)
        within: tuple[int, str] | None = None
        if required is not None and bound:
            # Members already running pin the domain the rest must join.
            first = self.cache.nodes.get(bound[0].node_name)
            if first is not None and first.paths[required]:
                within = (required, first.paths[required])
        nodes = self._candidates(candidates, state.key, within)
        needed = spec.min_count - len(bound)
        ordered = sorted(pending.values(), key=lambda m: (m.uid != first_uid, m.name))
        attempts = [ordered]
        if len(ordered) > needed:
            attempts.append(ordered[:needed])
        result: Placement | NoFit = NoFit("no members to place")
        for group in attempts:
            result = place_gang(
                nodes, [Member(m.uid, m.requests) for m in group], self.level_names, required, preferred
            )
            if isinstance(result, Placement):
                break
        if isinstance(result, NoFit):
            self.metrics.placements.labels("nofit").inc()
            state.last_reason = f"gang {state.key} {result.reason}"
            state.nofit_version = self._fit_version(state.key)
            state.nofit_candidates = _fingerprint(candidates)
            return result

        self.metrics.placements.labels("fit").inc()
        self._reserve(state, result, pending)
        state.min_count_reserved = needed
        state.last_reason = ""
        state.nofit_version = ()
        state.deadline = self._loop().call_later(
            self.config.gang.bind_timeout_seconds, self._deadline_passed, state.key
        )
        log.info(
            "gang reserved",
            extra={"gang": state.key, "members": len(result.assignment), "domain": "/".join(result.domain)},
        )
        others = [pending[u] for u in result.assignment if u != first_uid and u in self.cache.pods]
        self._requeue(state.key, others, "placement reserved")
        return result

    def _repair_partial_gangs(self, exclude: str) -> None:
        """Reserve first for gangs that run with fewer than minCount members bound.

        A gang ends up partly bound only when binding was cut short (Quorum restarted in the middle
        of a gang's concurrent bind calls, or the apiserver refused one of them). Its bound members
        pin its domain; if another gang were placed there first, the rest could never join and the
        partial gang would hold its capacity forever. So before any new placement, such gangs get
        their missing members reserved, against every node Quorum knows.
        """
        for key, uids in self.cache.gang_members.items():
            if key == exclude:
                continue
            state = self.gangs.get(key)
            if state is not None and (state.reservation or state.held or state.backoff_until > self.clock()):
                continue
            spec = self.cache.gang_spec(key)
            if spec is None or not spec.is_gang or spec.min_count < 1:
                continue
            members = [self.cache.pods[u] for u in uids if u in self.cache.pods]
            bound = [m for m in members if m.holds_capacity]
            if not bound or len(bound) >= spec.min_count:
                continue
            pending = {m.uid: m for m in members if m.pending}
            if len(pending) < spec.min_count - len(bound):
                continue
            state = self._state(key)
            if state.nofit_version == self._fit_version(key):
                continue
            result = self._plan_and_reserve(state, spec, pending, list(self.cache.nodes), bound, None)
            if isinstance(result, Placement):
                log.info("partly bound gang repaired", extra={"gang": key, "bound": len(bound)})

    def _replan(self, state: GangState, spec: GangSpec, pod: PodRecord, candidates: list[str],
                node: str) -> FilterDecision:
        """kube-scheduler's own filters no longer accept the reserved node: place the gang again."""
        state.replans += 1
        reason = f"gang {state.key}: reserved node {node} no longer passes the scheduler's filters"
        self._release(state, reason, "replan")
        if state.replans > self.config.gang.max_replans:
            state.replans = 0
            self._back_off(state, f"{reason} after {self.config.gang.max_replans} re-plans")
            return _reject_all(candidates, f"gang {state.key}: {state.last_reason}")
        members = self.cache.members(state.key)
        return self._place(state, spec, pod, candidates, members, [m for m in members if m.holds_capacity])

    def _filter_outside_gang(self, pod: PodRecord, candidates: list[str],
                             own_gang: str | None) -> FilterDecision:
        """Pods outside a reserving gang may use any node, except capacity reserved for a gang."""
        if not self.reserved_on_node:
            return FilterDecision(candidates)
        # Decide the (few) reserved nodes first, then drop them from the candidates in one pass.
        requests = pod.requests
        unresolvable: dict[str, str] = {}
        for name, (free, pods_free, reason, gangs) in self._protected_views().items():
            if own_gang is not None and gangs == (own_gang,):
                continue
            if not fits(free, pods_free, requests):
                unresolvable[name] = reason
        if not unresolvable:
            return FilterDecision(candidates)
        passing = [name for name in candidates if name not in unresolvable]
        if len(passing) + len(unresolvable) != len(candidates):
            wanted = set(candidates)
            unresolvable = {n: r for n, r in unresolvable.items() if n in wanted}
        return FilterDecision(passing, {}, unresolvable)

    def _protected_views(self) -> dict[str, tuple[Resources, int, str, tuple[str, ...]]]:
        key = (self.cache.capacity_version, self.reservation_version, self._inflight_version)
        if key != self._protected_key:
            views: dict[str, tuple[Resources, int, str, tuple[str, ...]]] = {}
            for name, gangs in self.reserved_on_node.items():
                free = self._free(name, None)
                holders = tuple(sorted(gangs))
                reason = f"capacity reserved for gang {', '.join(holders)}"
                views[name] = (free[0], free[1], reason, holders) if free else ({}, 0, reason, holders)
            self._protected, self._protected_key = views, key
        return self._protected

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, pod: PodRecord, candidates: list[str]) -> ScoreTable:
        key = pod.gang_key
        if key is not None:
            nodes = self._gang_nodes(key)
            if nodes:
                scores = distance_scores([n.paths for n in nodes], self.cache.domain_nodes,
                                         len(self.config.levels))
                return ScoreTable(scores, lambda name: scores.get(name, 0))
        if self._occupancy_epoch != self.cache.occupancy_epoch:
            self._occupancy_scores = {}
            self._occupancy_epoch = self.cache.occupancy_epoch
        epoch = ("occupancy", self._occupancy_epoch)
        return ScoreTable(self._occupancy_scores, self._occupancy_score_of, epoch)

    def _occupancy_score_of(self, name: str) -> int | None:
        node = self.cache.nodes.get(name)
        if node is None:
            return None
        score = self._occupancy_scores[name] = occupancy_score(node.paths, self.cache.domain_pods)
        return score

    def _gang_nodes(self, key: str) -> list[Any]:
        names = {m.node_name for m in self.cache.members(key) if m.holds_capacity}
        names.update(self._reservation(key).values())
        return [self.cache.nodes[n] for n in names if n in self.cache.nodes]

    # ------------------------------------------------------------------ bind
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Answer one bind call: "" on success, else the error text for kube-scheduler."""
        record = self.cache.pods.get(uid) if uid else None
        if record is not None and record.node_name:
            if record.node_name == node:
                self.metrics.binds.labels("already_bound").inc()
                return ""
            self.metrics.binds.labels("error").inc()
            return f"pod {namespace}/{name} is already bound to {record.node_name}"
        gang_key = self.reserved_uid.get(uid)
        if gang_key is None:
            return await self._bind_now(namespace, name, uid, node, record)
        state = self.gangs[gang_key]
        reserved_node = state.reservation.get(uid)
        if reserved_node != node:
            self.metrics.binds.labels("error").inc()
            return f"gang {gang_key}: pod {namespace}/{name} is reserved on {reserved_node}, not {node}"
        pod = record or PodRecord(uid, namespace, name, "", state.reserved_requests.get(uid, {}), False,
                                  False, gang_key)
        answer: asyncio.Future[str] = self._loop().create_future()
        previous = state.held.get(uid)
        if previous is not None and not previous.answer.done():
            previous.answer.set_result("superseded by a newer bind call for the same pod")
        state.held[uid] = HeldBind(pod, node, answer)
        self._maybe_release_quorum(state)
        try:
            return await answer
        except asyncio.CancelledError:
            # kube-scheduler gave up on this call (HTTP timeout); it no longer waits for the pod.
            if state.held.get(uid) is not None and state.held[uid].answer is answer:
                del state.held[uid]
            raise

    async def _bind_now(self, namespace: str, name: str, uid: str, node: str,
                        record: PodRecord | None) -> str:
        requests = record.requests if record is not None else {}
        self._mark_inflight(uid, node, requests)
        try:
            await self.actions.bind_pod(namespace, name, uid, node)
        except asyncio.CancelledError:
            self._clear_inflight(uid)
            raise
        except Exception as exc:  # BindFailed, or anything unexpected: never count the pod as bound
            self._clear_inflight(uid)
            self.metrics.binds.labels("error").inc()
            return str(exc) or type(exc).__name__
        self.metrics.binds.labels("success").inc()
        return ""

    def _maybe_release_quorum(self, state: GangState) -> None:
        spec = self.cache.gang_spec(state.key)
        min_count = spec.min_count if spec is not None else state.min_count_reserved
        bound = self.cache.bound_count(state.key)
        if len(state.held) + bound < min_count:
            return
        state.quorum_reached = True
        if state.deadline is not None:
            state.deadline.cancel()
            state.deadline = None
        held = list(state.held.values())
        state.held.clear()
        # Reserved members beyond quorum that have not reached bind become ordinary extras: they
        # keep no capacity they might never use.
        held_uids = {h.pod.uid for h in held}
        for uid in [u for u in state.reservation if u not in held_uids]:
            self._unreserve_member(state, uid)
        self.metrics.gang_wait.observe(max(0.0, self.clock() - state.first_seen))
        log.info("gang quorum reached", extra={"gang": state.key, "binding": len(held), "bound": bound})
        self._spawn(self._bind_all(state, held))

    async def _bind_all(self, state: GangState, held: list[HeldBind]) -> None:
        results = await asyncio.gather(
            *(self.actions.bind_pod(h.pod.namespace, h.pod.name, h.pod.uid, h.node) for h in held),
            return_exceptions=True,
        )
        for h, result in zip(held, results, strict=True):
            if isinstance(result, BaseException):
                self.metrics.binds.labels("error").inc()
                message = str(result) or type(result).__name__
                log.warning("gang member bind failed", extra={"gang": state.key, "pod": h.pod.key,
                                                                "error": message})
                if not h.answer.done():
                    h.answer.set_result(message)
            else:
                self.metrics.binds.labels("success").inc()
                # The cache will see the binding shortly; release the reservation now so the
                # capacity is not counted twice in between.
                self._unreserve_member(state, h.pod.uid)
                self._mark_inflight(h.pod.uid, h.node, h.pod.requests)
                if not h.answer.done():
                    h.answer.set_result("")

    def _deadline_passed(self, key: str) -> None:
        state = self.gangs.get(key)
        if state is None:
            return
        state.deadline = None
        if state.quorum_reached:
            return
        spec = self.cache.gang_spec(key)
        min_count = spec.min_count if spec is not None else state.min_count_reserved
        bound = self.cache.bound_count(key)
        reason = (
            f"gang {key}: quorum not reached within {self.config.gang.bind_timeout_seconds:g}s "
            f"({len(state.held) + bound}/{min_count} members reached bind)"
        )
        self.metrics.reservation_timeouts.inc()
        self._release(state, reason, "timeout")
        self._back_off(state, reason)

    # ------------------------------------------------------------------ preempt
    def preempt(self, pod: PodRecord, victims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Pass the scheduler's victims through, minus nodes whose eviction would break a gang
        running at exactly its quorum (evicting one member would strand the rest)."""
        out: dict[str, dict[str, Any]] = {}
        for node, entry in victims.items():
            uids = [p.get("UID", "") for p in entry.get("Pods", [])]
            if not uids or any(self._breaks_gang(uid) for uid in uids):
                continue
            out[node] = entry
        return out

    def _breaks_gang(self, uid: str) -> bool:
        record = self.cache.pods.get(uid)
        if record is None or record.gang_key is None:
            return False
        spec = self.cache.gang_spec(record.gang_key)
        if spec is None or not spec.is_gang:
            return False
        running = self.cache.bound_count(record.gang_key)
        return running <= spec.min_count

    # ------------------------------------------------------------------ cache events
    def on_cache_event(self, event: CacheEvent) -> None:
        if event.kind in (CAPACITY_FREED, MEMBER_READY):
            self._schedule_recheck()
        elif event.kind == POD_BOUND:
            self._clear_inflight(event.key)
            key = self.reserved_uid.get(event.key)
            if key is not None:
                self._unreserve_member(self.gangs[key], event.key)
            if event.pod is not None and event.pod.gang_key:
                self._check_bound(event.pod.gang_key)
        elif event.kind == POD_REMOVED:
            self._clear_inflight(event.key)
            key = self.reserved_uid.get(event.key)
            if key is not None:
                state = self.gangs[key]
                if not state.quorum_reached:
                    pod = event.pod.key if event.pod else event.key
                    self._release(state, f"gang {key}: member {pod} was deleted", "member-deleted")
                else:
                    self._unreserve_member(state, event.key)
            if event.pod is not None and event.pod.gang_key:
                self._forget_if_empty(event.pod.gang_key)
        elif event.kind == NODE_REMOVED:
            for key in {k for k in self.reserved_on_node.get(event.key, {})}:
                self._release(self.gangs[key], f"gang {key}: reserved node {event.key} was deleted",
                              "node-deleted")
        elif event.kind == GANG_REMOVED:
            removed = self.gangs.get(event.key)
            if removed is not None:
                self._release(removed, f"gang {event.key}: its PodGroup was deleted", "gang-deleted")
                self._forget_if_empty(event.key)
        elif event.kind == GANG_CHANGED:
            changed = self.gangs.get(event.key)
            spec = self.cache.gang_spec(event.key)
            active = changed is not None and changed.reservation and not changed.quorum_reached
            if changed is not None and spec is not None and active:
                bound = self.cache.bound_count(event.key)
                needed = spec.min_count - bound
                if needed > len(changed.reservation) + len(changed.held):
                    self._release(changed, f"gang {event.key}: min count raised to {spec.min_count}",
                                  "gang-changed")

    def _note_rejection(self, state: GangState, now: float) -> None:
        state.rejected_at = self._last_rejection = now

    def _schedule_recheck(self) -> None:
        if self._recheck is not None:
            return
        horizon = self.clock() - STALE_ANSWER_WINDOW_SECONDS
        if self._last_rejection <= horizon:  # O(1): called for every pod and node change
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a cache filled before serving): nothing has been answered yet
        self._recheck = loop.call_later(RECHECK_DELAY_SECONDS, self._recheck_recent_rejections)

    def _recheck_recent_rejections(self) -> None:
        """Ask one member of each recently rejected gang to try again if its answer would change.

        One member is enough: if the gang fits now, its placement wakes the others.
        """
        self._recheck = None
        now = self.clock()
        for key, state in self.gangs.items():
            if (state.rejected_at <= now - STALE_ANSWER_WINDOW_SECONDS or state.reservation
                    or state.backoff_until > now):
                continue
            spec = self.cache.gang_spec(key)
            if spec is None or not spec.is_gang:
                continue
            members = self.cache.members(key)
            if _alive(members) < spec.min_count:
                continue  # still short of members: the same answer again
            if state.nofit_version and state.nofit_version == self._fit_version(key):
                continue  # nothing the placement depends on has moved
            pending = sorted((m for m in members if m.pending), key=lambda m: m.name)
            if pending:
                state.rejected_at = 0.0
                self.metrics.rechecks.inc()
                self._requeue(key, pending[:1], "cluster changed since its last rejection")

    def _check_bound(self, key: str) -> None:
        state = self.gangs.get(key)
        spec = self.cache.gang_spec(key)
        if state is None or spec is None:
            return
        bound = self.cache.bound_count(key)
        if bound >= spec.min_count:
            state.failures = 0
            state.replans = 0
            state.quorum_reached = True
            if state.deadline is not None:
                state.deadline.cancel()
                state.deadline = None

    def _forget_if_empty(self, key: str) -> None:
        state = self.gangs.get(key)
        if state is None or self.cache.gang_members.get(key) or self.cache.podgroup_specs.get(key):
            return
        self._release(state, "gang gone", "gang-deleted")
        if state.backoff_timer is not None:
            state.backoff_timer.cancel()
        del self.gangs[key]

    # ------------------------------------------------------------------ introspection
    def phase(self, state: GangState) -> str:
        spec = self.cache.gang_spec(state.key)
        members = self.cache.members(state.key)
        if spec is None or spec.min_count < 1:
            return MISCONFIGURED if spec is not None else WAITING_FOR_MEMBERS
        bound = sum(1 for m in members if m.holds_capacity)
        if bound >= spec.min_count:
            return BOUND
        if state.held:
            return BINDING
        if state.reservation:
            return RESERVED
        if state.backoff_until > self.clock():
            return BACKOFF
        if _alive(members) < spec.min_count:
            return WAITING_FOR_MEMBERS
        return PENDING

    def phase_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(PHASES, 0)
        for state in self.gangs.values():
            counts[self.phase(state)] += 1
        return counts

    def inflight_snapshot(self) -> dict[str, str]:
        """Pods bound by Quorum that the watch has not shown bound yet (pod -> node)."""
        pods = self.cache.pods
        return {(pods[uid].key if uid in pods else uid): node for uid, node in sorted(self.inflight.items())}

    def reserved_count(self) -> dict[str, int]:
        return {"": len(self.reserved_uid)}

    def snapshot(self) -> list[dict[str, Any]]:
        """Read-only view for /debug/gangs."""
        out = []
        now = self.clock()
        for key, state in sorted(self.gangs.items()):
            spec = self.cache.gang_spec(key)
            members = self.cache.members(key)
            out.append(
                {
                    "gang": key,
                    "phase": self.phase(state),
                    "source": spec.source if spec else None,
                    "minCount": spec.min_count if spec else None,
                    "requiredTopology": spec.required_topology if spec else None,
                    "preferredTopology": spec.preferred_topology if spec else None,
                    "members": len(members),
                    "bound": sorted(f"{m.name}@{m.node_name}" for m in members if m.holds_capacity),
                    "reservation": {
                        self.cache.pods[u].name if u in self.cache.pods else u: n
                        for u, n in sorted(state.reservation.items())
                    },
                    "domain": "/".join(state.domain),
                    "held": sorted(h.pod.name for h in state.held.values()),
                    "backoffSeconds": round(max(0.0, state.backoff_until - now), 1),
                    "failures": state.failures,
                    "reason": state.last_reason,
                    "requests": format_resources(next(iter(state.reserved_requests.values()), {})),
                }
            )
        return out


def _alive(members: Iterable[PodRecord]) -> int:
    """Members that count towards the quorum gate: bound, or pending and schedulable now."""
    return sum(1 for m in members if m.counts_for_quorum)


def _fingerprint(candidates: list[str]) -> tuple[int, int]:
    """Identifies a set of node names whatever their order (kube-scheduler's varies between calls).

    A no-fit holds only for the nodes it was computed against: kube-scheduler's own cache can lag
    Quorum's, so an early retry may offer fewer nodes than a later one.
    """
    return len(candidates), hash(frozenset(candidates))  # ~0.1 ms at 5,000 nodes, only on a no-fit


def _reject_all(candidates: list[str], reason: str) -> FilterDecision:
    """Gang rejections are unresolvable: evicting single pods cannot make a gang fit."""
    return FilterDecision([], {}, dict.fromkeys(candidates, reason))
