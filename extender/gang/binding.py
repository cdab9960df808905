"""The bind hold: members are bound only together, once enough of them reached bind.

Extenders have no Permit stage, so the bind call is where a pod is held: kube-scheduler keeps the
pod assumed while its call waits. A gang member is bound only if its gang reaches quorum at that
moment (its held bind completes the quorum) or is already running (an extra member); a member
whose reservation was released between its filter answer and its bind is refused, never bound
alone.

A gang's bindings go out together, in its turn (``bind_turns.py``). A batch that takes longer than
``BIND_TURN_SECONDS`` no longer holds the next gang back (a slow apiserver must not stall every
gang behind one).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from ..cluster.composites import parts_short
from ..cluster.records import PodRecord
from ..cluster.resources import Resources
from ..topology.placement import fits
from .bind_turns import BindTurns
from .core import Core
from .registry import GangRegistry
from .state import GangState, HeldBind, drop_held, hold_bind, take_held
from .timers import Deadline

log = logging.getLogger(__name__)

# Pods filtered before the watch delivered them, as the filter call showed them: enough to know
# the gang and the requests of their bind call.
RECENT_PODS_LIMIT = 10_000
# A gang's batch of bindings holds its turn at most this long.
BIND_TURN_SECONDS = 2.0


class Binder:
    def __init__(self, core: Core, registry: GangRegistry) -> None:
        self.core = core
        self.registry = registry
        self._recent_pods: OrderedDict[str, PodRecord] = OrderedDict()  # uid -> pod at filter (bounded)
        self._turns = BindTurns(core.config.gang.bindings_at_once)

    def note_pod(self, pod: PodRecord) -> None:
        """Remember a pod seen at filter before the watch delivered it: its bind may come first, and
        its requests must count on the node from the bind on (a plain pod's as much as a member's)."""
        if pod.uid and pod.uid not in self.core.cache.pods:
            self._recent_pods[pod.uid] = pod
            self._recent_pods.move_to_end(pod.uid)
            while len(self._recent_pods) > RECENT_PODS_LIMIT:
                self._recent_pods.popitem(last=False)

    def forget_member(self, uid: str) -> None:
        self._recent_pods.pop(uid, None)

    def gang_of(self, uid: str, record: PodRecord | None) -> str | None:
        if record is not None:
            return record.gang_key
        recent = self._recent_pods.get(uid)
        return recent.gang_key if recent is not None else None

    def requests_of(self, uid: str, record: PodRecord | None) -> Resources:
        """What the pod asks for: the watch's view, else the filter call's, else nothing known."""
        known = record or self._recent_pods.get(uid)
        return known.requests if known is not None else {}

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Answer one bind call: "" on success, else the error text for kube-scheduler."""
        core = self.core
        record = core.cache.pods.get(uid) if uid else None
        refusal = self._not_ours(namespace, name, uid, record)
        if refusal:
            core.metrics.binds.labels("refused").inc()
            log.warning("bind refused", extra={"pod": f"{namespace}/{name}", "reason": refusal})
            return refusal
        if record is not None and record.node_name:
            if record.node_name == node:
                core.metrics.binds.labels("already_bound").inc()
                return ""
            core.metrics.binds.labels("error").inc()
            return f"pod {namespace}/{name} is already bound to {record.node_name}"
        reservation = core.ledger.reserved_node(uid) if uid else None
        if reservation is None:
            refusal = self._refusal_without_reservation(namespace, name, uid, record) or \
                self._refusal_on_reserved_capacity(node, uid, record)
            if refusal:
                core.metrics.binds.labels("refused").inc()
                return refusal
            return await self._bind_now(namespace, name, uid, node, record)
        state = self.registry.state(reservation.gang)
        if reservation.node != node:
            core.metrics.binds.labels("error").inc()
            return f"gang {state.key}: pod {namespace}/{name} is reserved on {reservation.node}, not {node}"
        pod = record or PodRecord(uid, namespace, name, "", reservation.requests, False, False, state.key)
        return await self._hold(state, pod, node)

    def _not_ours(self, namespace: str, name: str, uid: str, record: PodRecord | None) -> str:
        """A bind Quorum must not carry out for anyone: no UID (the binding's precondition that
        the pod is the one scheduled), or a pod of a scheduler profile Quorum does not serve."""
        if not uid:
            return f"bind of {namespace}/{name} refused: the request names no pod UID"
        if record is not None and not self.core.schedules(record):
            return (f"bind of {namespace}/{name} refused: its schedulerName is {record.scheduler_name!r}, "
                    f"not one of Quorum's profiles ({', '.join(self.core.config.scheduler_names)})")
        return ""

    def _refusal_without_reservation(self, namespace: str, name: str, uid: str,
                                     record: PodRecord | None) -> str:
        """Why a pod without a reservation must not be bound now ("" if it may be)."""
        core = self.core
        gang = self.gang_of(uid, record)
        if gang is None:
            return ""
        spec = core.cache.gang_spec(gang)
        if spec is None or not spec.is_gang or spec.problem or spec.min_count < 1:
            return "" if spec is not None and not spec.is_gang else \
                f"gang {gang}: pod {namespace}/{name} cannot bind before its gang is valid"
        if self.registry.running_count(gang) >= spec.min_count:
            return ""  # the gang runs at quorum: this is an extra member
        return (f"gang {gang}: pod {namespace}/{name} holds no reservation (released before its "
                f"bind); it is placed again with its gang")

    def _refusal_on_reserved_capacity(self, node: str, uid: str, record: PodRecord | None) -> str:
        """Why binding this pod to ``node`` would take capacity a gang has reserved ("" if not).

        kube-scheduler binds only what filter passed, and filter keeps pods off reserved capacity;
        a bind call that skipped filter must not over-commit the node either.
        """
        view = self.core.ledger.protected().get(node)
        if view is None:
            return ""
        own = self.gang_of(uid, record)
        if own is not None and view.holders == (own,):
            return ""
        requests = self.requests_of(uid, record)
        return "" if fits(view.free, view.pods_free, requests) else f"node {node}: {view.reason}"

    async def _hold(self, state: GangState, pod: PodRecord, node: str) -> str:
        answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        previous = hold_bind(state, HeldBind(pod, node, answer))
        if previous is not None and not previous.answer.done():
            previous.answer.set_result("superseded by a newer bind call for the same pod")
        self.release_if_quorum(state)
        self.registry.sync(state, f"gang {state.key}: {len(state.held)} member(s) waiting at bind")
        try:
            return await answer
        except asyncio.CancelledError:
            # kube-scheduler gave up on this call (HTTP timeout); it no longer waits for the pod.
            if drop_held(state, pod.uid, answer):
                self.registry.sync(state, "a held bind call was abandoned by the scheduler")
            raise

    async def _bind_now(self, namespace: str, name: str, uid: str, node: str,
                        record: PodRecord | None) -> str:
        core = self.core
        requests = self.requests_of(uid, record)
        # A member the watch has not shown yet (an extra of a gang at quorum) counts for its gang,
        # and is known by name should the gang be requeued before its pod is seen.
        gang = self.gang_of(uid, record) if record is None else None
        unseen = PodRecord(uid, namespace, name, "", requests, False, False, gang) if gang else None
        core.ledger.mark_inflight(uid, node, requests, gang=gang, pod=unseen)
        try:
            await core.actions.bind_pod(namespace, name, uid, node)
        except asyncio.CancelledError:
            core.ledger.clear_inflight(uid)
            self._resync(uid, record)
            raise
        except Exception as exc:  # BindFailed, or anything unexpected: never count the pod as bound
            core.ledger.clear_inflight(uid)
            self._resync(uid, record)
            core.metrics.binds.labels("error").inc()
            return str(exc) or type(exc).__name__
        core.metrics.binds.labels("success").inc()
        return ""

    def _resync(self, uid: str, record: PodRecord | None) -> None:
        """A bind that counted its pod as running did not happen: the gang's phase follows."""
        state = self.registry.gangs.get(self.gang_of(uid, record) or "")
        if state is not None:
            self.registry.sync(state)

    def release_if_quorum(self, state: GangState) -> None:
        """Bind every held member at once when, with those already running, they reach minCount."""
        core = self.core
        spec = core.cache.gang_spec(state.key)
        min_count = core.min_count(state, spec)
        running = self.registry.running_count(state.key)
        if len(state.held) + running < min_count:
            return
        if spec is not None and spec.min_parts:
            # A composite binds when every part can: one part's extras stand in for no other's.
            if parts_short(spec, [*(h.pod for h in state.held.values()),
                                  *self.registry.running_members(state.key)]):
                return
        self.registry.timers.cancel(state.key, Deadline.BIND)
        held = take_held(state)
        # Reserved members beyond quorum that have not reached bind become ordinary extras: they
        # keep no capacity they might never use.
        held_uids = {h.pod.uid for h in held}
        for uid in [u for u in core.ledger.reservation_of(state.key) if u not in held_uids]:
            core.ledger.unreserve(uid)
        # From here the capacity is counted as in flight, not reserved: never both, never neither.
        for h in held:
            core.ledger.unreserve(h.pod.uid)
            core.ledger.mark_inflight(h.pod.uid, h.node, h.pod.requests, gang=state.key, pod=h.pod)
        # A gang already running at quorum binds these as extras: no quorum batch, no Binding phase.
        counted = running < min_count
        if counted:
            state.binds_in_flight += len(held)
        core.metrics.gang_wait.observe(max(0.0, core.clock() - state.first_seen))
        log.info("gang quorum reached", extra={"gang": state.key, "binding": len(held), "bound": running})
        core.spawn(self._bind_all(state, held, counted))

    async def _in_turn(self, held: list[HeldBind]) -> list[BaseException | None]:
        """Send the batch in the gang's turn; each binding's result, or the exception it raised.

        Each binding gives its room back as it completes, so the next gang's batch starts beside
        the tail of this one instead of after its slowest binding."""
        if not held:
            return []
        actions = self.core.actions
        await self._turns.take(len(held))
        room = len(held)  # what this batch still holds of the turns

        def give_back_one(_: object) -> None:
            nonlocal room
            if room:
                room -= 1
                self._turns.give_back(1)
        sent = [asyncio.ensure_future(actions.bind_pod(h.pod.namespace, h.pod.name, h.pod.uid, h.node))
                for h in held]
        for binding in sent:
            binding.add_done_callback(give_back_one)
        results = asyncio.gather(*sent, return_exceptions=True)  # collects every outcome, even if cancelled
        try:
            await asyncio.wait(sent, timeout=BIND_TURN_SECONDS)
        finally:
            self._turns.give_back(room)  # what a slow batch still holds goes after its turn
            room = 0
        return await results

    async def _bind_all(self, state: GangState, held: list[HeldBind], counted: bool) -> None:
        core = self.core
        started = core.clock()
        try:
            results = await self._in_turn(held)
        finally:
            if counted:
                state.binds_in_flight -= len(held)
        core.metrics.gang_binds.observe(max(0.0, core.clock() - started))
        for h, result in zip(held, results, strict=True):
            if isinstance(result, BaseException):
                core.ledger.clear_inflight(h.pod.uid)
                core.metrics.binds.labels("error").inc()
                message = str(result) or type(result).__name__
                log.warning("gang member bind failed", extra={"gang": state.key, "pod": h.pod.key,
                                                                "error": message})
                if not h.answer.done():
                    h.answer.set_result(message)
            else:
                core.metrics.binds.labels("success").inc()
                if not h.answer.done():
                    h.answer.set_result("")
        self.registry.sync(state, f"gang {state.key}: quorum bound")
