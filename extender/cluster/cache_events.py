"""What the cache tells the coordinator: the kinds of event, and which ones a pod's update makes.

Kept apart from the cache so that the cache module stays about its indexes, and so that the rules
for a pod's events can be read on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .records import PodRecord


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """What the coordinator needs to hear about; ``key`` is a pod uid, node name or gang key."""

    kind: str  # one of the event kinds below
    key: str
    pod: PodRecord | None = None


Listener = Callable[[CacheEvent], None]

# Event kinds. ``key`` is a pod uid for the pod events, a node name for the node events and a gang
# key for the gang events.
POD_BOUND = "pod-bound"
POD_REMOVED = "pod-removed"  # deleted, terminating, finished, or gone from its gang
NODE_REMOVED = "node-removed"
NODE_CHANGED = "node-changed"  # a node shrank or moved to other topology domains
CAPACITY_FREED = "capacity-freed"  # a node appeared or grew, or a pod stopped holding capacity
GANG_REMOVED = "gang-removed"
GANG_CHANGED = "gang-changed"
MEMBER_READY = "member-ready"  # a pod became schedulable as a member of a gang
MEMBER_UNSCHEDULABLE = "member-unschedulable"  # kube-scheduler found no node for a pending member
# After the bind: a bound gang member's Ready condition changed, or it succeeded.
MEMBER_HEALTH = "member-health"
NODE_READINESS = "node-readiness"  # a node's Ready condition changed
# DRA devices on a node were freed or taken (``key`` "" when every node may have moved).
DEVICES_MOVED = "devices-moved"
# A full list of pods was loaded: ``key`` is the number of the list (``ClusterCache.listing_pods``).
PODS_LISTED = "pods-listed"
# Every kind is listed and being watched: after a start, or after a watch was down. ``key`` is "".
CACHES_SYNCED = "caches-synced"


def lifecycle_events(old: PodRecord | None, record: PodRecord, left_gang: bool) -> Iterator[CacheEvent]:
    """A pod's update as the coordinator hears it: bound, gone (from the cluster or from its gang),
    or no longer holding capacity where it was. Lazy, so each event is judged after the one before
    it was told, as when the cache judged them inline."""
    if record.node_name and (old is None or not old.node_name):
        yield CacheEvent(POD_BOUND, record.uid, record)
    if old is not None and _stopped(record) and not _stopped(old):
        yield CacheEvent(POD_REMOVED, record.uid, record)
    elif left_gang and old is not None:
        yield CacheEvent(POD_REMOVED, record.uid, old)  # gone from its old gang
    if old is not None and old.holds_capacity and (
        not record.holds_capacity or record.node_name != old.node_name
    ):
        yield CacheEvent(CAPACITY_FREED, old.node_name)


def member_events(old: PodRecord | None, record: PodRecord, gang_key: str | None) -> Iterator[CacheEvent]:
    """A gang member's update as the coordinator hears it: ready to be placed, found unschedulable
    by kube-scheduler, or its health changed after the bind."""
    if not gang_key:
        return
    if record.counts_for_quorum and (old is None or old.gang_key != gang_key or not old.counts_for_quorum):
        yield CacheEvent(MEMBER_READY, gang_key, record)
    if record.unschedulable and not record.node_name and not (old and old.unschedulable):
        yield CacheEvent(MEMBER_UNSCHEDULABLE, gang_key, record)
    if record.node_name and old is not None and _health(old) != _health(record):
        yield CacheEvent(MEMBER_HEALTH, record.uid, record)


def _stopped(pod: PodRecord) -> bool:
    """Finished or being deleted: the pod is on its way out of the cluster."""
    return pod.terminal or pod.deleting


def _health(pod: PodRecord) -> tuple[bool, bool, bool]:
    """What a bound member reports of its run: Ready, succeeded, started."""
    return pod.ready, pod.succeeded, pod.started
