"""How the gang core reacts to what the informer cache reports.

Members, nodes and gang objects change outside Quorum's requests: a reservation whose member,
node or PodGroup is gone is released whole; a reserved node that shrank or was filled by a pod
bound elsewhere makes its gangs re-plan; a gang whose declaration changed is re-derived; waiting
gangs are nudged when the reason they wait for goes away (a PodGroup appearing, a restart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from ..cluster.cache_events import (
    CACHES_SYNCED,
    CAPACITY_FREED,
    DEVICES_MOVED,
    GANG_CHANGED,
    GANG_REMOVED,
    MEMBER_HEALTH,
    MEMBER_READY,
    MEMBER_UNSCHEDULABLE,
    NODE_CHANGED,
    NODE_READINESS,
    NODE_REMOVED,
    POD_BOUND,
    POD_REMOVED,
    PODS_LISTED,
    CacheEvent,
)
from ..cluster.records import GangSpec
from .binding import Binder
from .core import Core
from .lifecycle import Lifecycle
from .provisioning import Provisioner
from .queue import GangQueue
from .registry import GangRegistry
from .retry import Retry
from .state import GangState, Phase, reset_failures, see_declaration
from .timers import Deadline


class CacheReactions:
    """The gang core's side of cache events: a part the coordinator holds, given what it uses."""

    def __init__(self, core: Core, registry: GangRegistry, binder: Binder, retry: Retry, lifecycle: Lifecycle,
                 provisioner: Provisioner, queue: GangQueue, verify: Callable[[str], None],
                 members_changed: Callable[[str], None] = lambda _key: None,
                 conditions_shown: Callable[[str], None] = lambda _key: None) -> None:
        self.core = core
        self.registry = registry
        self.cache = core.cache
        self.binder = binder
        self.retry = retry
        self.lifecycle = lifecycle
        self.provisioner = provisioner
        self.queue = queue
        self._verify = verify
        self._members_changed = members_changed
        self._conditions_shown = conditions_shown

    def on_cache_event(self, event: CacheEvent) -> None:
        handler = self._handlers.get(event.kind)
        if handler is not None:
            handler(self, event)
        for key in self._counted_gangs(event):
            self._members_changed(key)  # a lost member may change no phase (extras, or Recovering)
        self.queue.upkeep()  # what the event changed may make, move or release the claim
        if handler is not None:
            self._verify(event.kind)

    def _counted_gangs(self, event: CacheEvent) -> list[str]:
        """Gangs whose count of scheduled members the event may have moved."""
        if event.kind in (POD_BOUND, POD_REMOVED):
            return [event.pod.gang_key] if event.pod is not None and event.pod.gang_key else []
        if event.kind == NODE_REMOVED:  # its members were just marked as evicted
            return sorted({m.gang_key for m in self.cache.pods.values()
                           if m.node_name == event.key and m.gang_key})
        return []

    def _on_capacity(self, event: CacheEvent) -> None:
        self.retry.schedule_recheck()

    def _on_pod_bound(self, event: CacheEvent) -> None:
        core = self.core
        if event.pod is not None and not core.ledger.is_inflight(event.key):
            self._release_overcommitted(event.pod.node_name, f"pod {event.pod.key} was bound there")
        counted_for = core.ledger.inflight_gang(event.key)
        core.ledger.clear_inflight(event.key)
        if counted_for and (event.pod is None or event.pod.gang_key != counted_for):
            # Bound in flight for the gang its request named, seen in another (its JobSet or
            # PodGroup changed meanwhile): the first counted it, and must count it no more.
            self._recount(counted_for, f"gang {counted_for}: member {event.key} was filed in another gang")
        self.retry.unpark(event.key)
        self.binder.forget_member(event.key)
        reservation = core.ledger.reserved_node(event.key)
        if reservation is not None:
            core.ledger.unreserve(event.key)  # bound by someone else, or a late watch: no double count
            if reservation.gang in self.registry.gangs:
                self.registry.sync(self.registry.gangs[reservation.gang])
        if event.pod is not None and event.pod.gang_key:
            state = self.registry.gangs.get(event.pod.gang_key)
            if state is not None:
                running = self.registry.running_count(state.key)
                if running >= core.min_count(state, core.cache.gang_spec(state.key)):
                    reset_failures(state)
                    if not state.held and not state.binds_in_flight:
                        # At quorum (members bound elsewhere, or a late watch): what is still
                        # reserved belongs to extras, which keep no capacity they may never use.
                        core.ledger.release_gang(state.key)
                    if not core.ledger.reserved_count(state.key):
                        self.registry.timers.cancel(state.key, Deadline.BIND)
                self.registry.sync(state, f"gang {state.key}: member {event.pod.key} bound")
                self.lifecycle.review(state.key)

    def _on_pod_removed(self, event: CacheEvent) -> None:
        core = self.core
        # A pod the cache never took (``event.pod`` None) counted for its gang through its bind alone.
        unseen_of = core.ledger.inflight_gang(event.key) if event.pod is None else ""
        core.ledger.clear_inflight(event.key)
        if self.retry.is_parked(event.key):
            self._wake_if_ungrouped(event)
        self.retry.unpark(event.key)
        self.binder.forget_member(event.key)
        reservation = core.ledger.reserved_node(event.key)
        if reservation is not None:
            state = self.registry.state(reservation.gang)
            pod = event.pod.key if event.pod else event.key
            self.registry.release(state, f"gang {state.key}: member {pod} was deleted", "member-deleted")
            self.registry.sync(state)
        if event.pod is not None and event.pod.gang_key:
            if event.pod.uid not in core.cache.pods:
                self.lifecycle.forget_evicted(event.pod)  # gone for good (deleting: still marked)
                self.lifecycle.forget_stamped(event.pod)
            self.lifecycle.review(event.pod.gang_key, sync=False)
            self.provisioner.members_left(event.pod.gang_key)
            self._settle(event.pod.gang_key)
        self._recount(unseen_of, f"gang {unseen_of}: member {event.key} deleted before the watch showed it")

    def _wake_if_ungrouped(self, event: CacheEvent) -> None:
        """A pod Quorum turned away as a member that is in no gang any more (its JobSet asks for
        none): kube-scheduler sees no event that would retry it, so Quorum does."""
        pod = self.core.cache.pods.get(event.key)
        if pod is not None and pod.pending and pod.gang_key is None and event.pod is not None:
            self.core.requeue(event.pod.gang_key or "", [pod], "left the gang, schedules on its own")

    def _on_pods_listed(self, event: CacheEvent) -> None:
        """A full list of pods is in: binds Quorum still counts for pods it does not hold were of
        pods deleted while the watch was away; nothing else will ever let them go."""
        for uid, gang in self.core.ledger.unlisted(int(event.key)).items():
            self.core.ledger.clear_inflight(uid)
            self.retry.unpark(uid)
            self.binder.forget_member(uid)
            self._recount(gang, f"gang {gang}: a member bound while the watch was away is gone")
        self.retry.schedule_recheck()

    def _recount(self, gang: str, why: str) -> None:
        """A member the gang counted through its bind in flight alone is gone from it."""
        state = self.registry.gangs.get(gang) if gang else None
        if state is not None:
            self.registry.sync(state, why)
            self._members_changed(gang)
            self.lifecycle.review(gang)

    def _on_member_ready(self, event: CacheEvent) -> None:
        if event.pod is not None:
            self.lifecycle.stamp(event.pod)  # a new member of a requeued annotation gang
        self.retry.schedule_recheck()

    def _on_member_unschedulable(self, event: CacheEvent) -> None:
        """kube-scheduler found no node for a member, maybe without asking Quorum (no node passed its
        own filters, e.g. none exists yet): a gang whose pods consume a scale-up request is Quorum's
        to ask for, the autoscaler leaving such pods alone."""
        self.provisioner.consider(event.key)

    def _on_member_health(self, event: CacheEvent) -> None:
        if event.pod is not None and event.pod.gang_key:
            self.lifecycle.review(event.pod.gang_key)

    def _on_node_readiness(self, event: CacheEvent) -> None:
        """Members on a node that stopped (or resumed) being Ready: re-read their gangs."""
        for key in {m.gang_key for m in self.core.cache.pods.values()
                    if m.node_name == event.key and m.gang_key}:
            if key:
                self.lifecycle.review(key)

    def _on_node_removed(self, event: CacheEvent) -> None:
        self.lifecycle.node_deleted(event.key)
        for key in self.core.ledger.gangs_on(event.key):
            state = self.registry.state(key)
            self.registry.release(state, f"gang {key}: reserved node {event.key} was deleted", "node-deleted")
            self.registry.sync(state)

    def _release_overcommitted(self, node: str, why: str) -> None:
        """A pod bound outside Quorum (another scheduler, a user's nodeName) took capacity a gang had
        reserved: the reservation cannot hold any more, so the gang re-plans around it."""
        ledger = self.core.ledger
        if not ledger.gangs_on(node):
            return
        if ledger.short_on(node) is None:
            return
        for key in ledger.gangs_on(node):
            state = self.registry.state(key)
            self.registry.release(state, f"gang {key}: reserved node {node} is full ({why})", "node-changed")
            self.registry.sync(state)

    def _on_devices_moved(self, event: CacheEvent) -> None:
        """DRA devices freed (a waiting gang may fit) or taken outside Quorum's reservations."""
        self.retry.schedule_recheck()
        nodes = [event.key] if event.key else self.core.ledger.overcommitted_nodes()
        for node in nodes:
            self._release_overcommitted(node, "its devices were allocated to others")

    def _on_node_changed(self, event: CacheEvent) -> None:
        """A reserved node that shrank below its reservations, or moved to other domains, no longer
        holds the placement it was chosen for: release the gangs reserved there (they re-plan)."""
        ledger = self.core.ledger
        if not ledger.gangs_on(event.key):
            return
        shrunk = ledger.short_on(event.key) is not None
        for key in ledger.gangs_on(event.key):
            state = self.registry.state(key)
            if shrunk or state.domain:
                self.registry.release(state, f"gang {key}: reserved node {event.key} changed", "node-changed")
                self.registry.sync(state)

    def _on_gang_removed(self, event: CacheEvent) -> None:
        self.provisioner.gang_removed(event.key)
        state = self.registry.gangs.get(event.key)
        if state is not None:
            self.registry.release(state, f"gang {event.key}: its PodGroup was deleted", "gang-deleted")
            self.lifecycle.forget_start(state)
            self._settle(event.key)

    def _on_gang_changed(self, event: CacheEvent) -> None:
        core = self.core
        state = self.registry.gangs.get(event.key)
        spec = core.cache.gang_spec(event.key)
        if spec is None:
            return
        if state is None and (spec.requeues or spec.deactivated):
            state = self.registry.state(event.key)  # requeued or deactivated before a restart: resume it
            see_declaration(state, spec)
            self.lifecycle.adopt(state, spec)
            return
        if state is None:
            # A PodGroup created after its pods: they were rejected while it was missing, and
            # kube-scheduler sees no event that would retry them. Wake them now (after the first
            # list only: at start every gang gets its nudge once the caches have synced).
            if core.cache.gang_objects_synced():
                self.retry.nudge_gang(event.key, "its PodGroup appeared")
            return
        if state.spec_seen is not None and state.spec_seen.declaration() == spec.declaration():
            see_declaration(state, spec)
            self.lifecycle.adopt(state, spec)  # Quorum's own bookkeeping, or a status update
            self._conditions_shown(event.key)  # which may have replaced a condition Quorum applied
            return
        see_declaration(state, spec)
        self.lifecycle.declaration_changed(state, spec)
        self.registry.sync(state, self._redeclared(state, spec, from_podgroup=event.pod is None))

    def _redeclared(self, state: GangState, spec: GangSpec, from_podgroup: bool) -> str:
        """Release a reservation the new declaration cannot keep, or wake the members of a gang
        that holds none; the reason to show ("" to keep the gang's own)."""
        core = self.core
        key = state.key
        reason = ""
        reserved = core.ledger.reserved_count(key)
        needed = spec.min_count - self.registry.running_count(key)
        if (reserved or state.held) and (not spec.is_gang or spec.problem):
            # No longer a (valid) gang: its members schedule on their own, holding nothing.
            self.registry.release(state, f"gang {key}: no longer a gang ({spec.problem or 'basic policy'})",
                         "gang-changed")
        elif reserved and not state.binds_in_flight and needed > reserved + len(state.held):
            self.registry.release(state, f"gang {key}: min count raised to {spec.min_count}", "gang-changed")
        elif not reserved and not state.held and state.phase != Phase.BOUND and from_podgroup:
            # Only a PodGroup change wakes members: members whose annotations disagree would flip
            # the declaration on every pod update, and a nudge is itself a pod update.
            self.retry.nudge_gang(key, "its declaration changed")
            # The last reason (e.g. "waiting for its PodGroup") no longer holds; a basic group's
            # members are never filtered as a gang again, so nothing else would replace it.
            what = "members retried" if spec.is_gang else "basic policy, members schedule on their own"
            reason = f"gang {key}: declaration changed; {what}"
        return reason

    def _on_synced(self, event: CacheEvent) -> None:
        self.retry.nudge_waiting_after_sync()
        self.provisioner.sweep()

    def _settle(self, key: str) -> None:
        state = self.registry.gangs.get(key)
        if state is not None:
            self.registry.sync(state)
            self.registry.forget_if_idle(key)

    _handlers: ClassVar[dict[str, Callable[[CacheReactions, CacheEvent], None]]] = {
        CAPACITY_FREED: _on_capacity,
        MEMBER_READY: _on_member_ready,
        MEMBER_UNSCHEDULABLE: _on_member_unschedulable,
        MEMBER_HEALTH: _on_member_health,
        NODE_READINESS: _on_node_readiness,
        POD_BOUND: _on_pod_bound,
        POD_REMOVED: _on_pod_removed,
        PODS_LISTED: _on_pods_listed,
        NODE_REMOVED: _on_node_removed,
        NODE_CHANGED: _on_node_changed,
        DEVICES_MOVED: _on_devices_moved,
        GANG_REMOVED: _on_gang_removed,
        GANG_CHANGED: _on_gang_changed,
        CACHES_SYNCED: _on_synced,
    }
