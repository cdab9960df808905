"""Which pods are in which gang, and what the members' own annotations declare of it.

The cache decides a pod's gang (``conventions.py``, ``filing.py``); this index follows the
pod in and out of it, and keeps the members' declarations with ``declarations.py`` (an index entry
is dropped with its last member, so gangs coming and going never grow it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Set
from typing import Any, Generic, TypeVar

from .conventions import MemberTopology, spec_from_pod, topology_of_pod
from .declarations import Declarations
from .records import GangSpec, PodRecord

T = TypeVar("T")

NO_MEMBERS: frozenset[str] = frozenset()

# The states a gang's members are kept in as their records change, so that a gang's counts are
# read without walking its members: each watch event of a gang of n members walked all n several
# times (n² per gang over its life; a 256-member gang paid 1.4 ms per member for it). Counts that
# follow from others are derived (``running_count``, ``alive_count``, ``started_count``): a gang
# that runs is in two full sets (holding, Ready), the rest hold members on their way somewhere.
MEMBER_STATES: dict[str, Callable[[PodRecord], bool]] = {
    "pending": lambda pod: pod.pending,  # ready for a node
    "holding": lambda pod: pod.holds_capacity,  # bound and not finished
    "leaving": lambda pod: pod.holds_capacity and pod.deleting,  # holds capacity, no longer runs
    "ready": lambda pod: pod.holds_capacity and not pod.deleting and pod.ready,  # runs and is Ready
    "unstarted": lambda pod: pod.holds_capacity and not pod.started,  # bound, no kubelet took it yet
    "succeeded": lambda pod: pod.succeeded,
    "unbound": lambda pod: not pod.node_name,  # no node yet (a bind in flight may be unseen)
}


class LatestPerMember(Generic[T]):
    """What each member of a gang declares, latest last (the order of their events): the latest
    is the gang's, and when its member leaves, the latest remaining one's is. Equal values share
    one object, so a gang's members cost a dict entry each."""

    def __init__(self) -> None:
        self.by_gang: dict[str, dict[str, T]] = {}

    def note(self, gang_key: str, uid: str, value: T) -> None:
        values = self.by_gang.setdefault(gang_key, {})
        values.pop(uid, None)
        if values:
            latest = values[next(reversed(values))]
            if latest == value:
                value = latest
        values[uid] = value

    def drop(self, gang_key: str, uid: str) -> T | None:
        """Forget a member's value; the latest remaining member's when the departing one's was the
        gang's, else None."""
        values = self.by_gang.get(gang_key)
        if values is None or uid not in values:
            return None
        was_latest = next(reversed(values)) == uid
        del values[uid]
        if not values:
            del self.by_gang[gang_key]
            return None
        return values[next(reversed(values))] if was_latest else None


class Membership:
    def __init__(self, declarations: Declarations) -> None:
        self.gang_members: dict[str, set[str]] = defaultdict(set)
        # state -> gang key -> member uids in that state (``MEMBER_STATES``), kept as pods change.
        self.in_state: dict[str, defaultdict[str, set[str]]] = {
            name: defaultdict(set) for name in MEMBER_STATES}
        # The search for partly bound gangs visits only gangs with both.
        self.pending_in = self.in_state["pending"]  # gang key -> members ready for a node
        self.holding_in = self.in_state["holding"]  # gang key -> members holding capacity
        # What each member's annotations declare and what topology they ask for: when the member
        # whose declaration (or topology) is the gang's leaves, the latest remaining member's takes over.
        self.declared = LatestPerMember[GangSpec]()
        self.topologies = LatestPerMember[MemberTopology]()
        self._declarations = declarations

    def join(self, gang_key: str, uid: str, obj: dict[str, Any]) -> str:
        """Index a gang member and the declaration its annotations carry; returns the gang key
        when the gang's declaration changed (the caller tells the coordinator after the pod's events)."""
        return self.enter(gang_key, uid, spec_from_pod(obj), topology_of_pod(obj))

    def enter(self, gang_key: str, uid: str, spec: GangSpec | None, topology: MemberTopology | None) -> str:
        """``join`` with what the member's annotations declare already read."""
        self.gang_members[gang_key].add(uid)
        if spec is None and topology is None:
            return ""
        if spec is not None:
            self.declared.note(gang_key, uid, spec)
        if topology is not None:
            self.topologies.note(gang_key, uid, topology)
        return self._declare(gang_key, spec, topology)

    def _declare(self, gang_key: str, spec: GangSpec | None, topology: MemberTopology | None) -> str:
        """Put a member's declaration; the gang key when what the gang declares changed."""
        before = self._declarations.spec(gang_key)
        self._declarations.put_member(gang_key, spec, topology)
        after = self._declarations.spec(gang_key)
        # What the annotations declare, not which pod carried them nor when it was created.
        changed = before is not None and after is not None and before.declaration() != after.declaration()
        return gang_key if changed else ""

    def leave(self, uid: str, gang_key: str) -> str:
        """Take a member out of its gang; returns the gang key when the gang's declaration changed
        because the member that made it left (the latest remaining member's declares it now)."""
        spec = self.declared.drop(gang_key, uid)
        topology = self.topologies.drop(gang_key, uid)
        members = self.gang_members.get(gang_key)
        if members is None:
            return ""
        members.discard(uid)
        if not members:
            del self.gang_members[gang_key]
            self._declarations.forget_members(gang_key)
            return ""
        if spec is None and topology is None:
            return ""
        return self._declare(gang_key, spec, topology)

    def members_in(self, state: str, gang_key: str) -> Set[str]:
        """The gang's members in ``state`` (a name of ``MEMBER_STATES``): a read-only view."""
        return self.in_state[state].get(gang_key, NO_MEMBERS)

    def running_count(self, gang_key: str, excluded: Set[str] = NO_MEMBERS) -> int:
        """Members that run (bound, not finished, not being deleted), less ``excluded``."""
        holding, leaving = self.members_in("holding", gang_key), self.members_in("leaving", gang_key)
        gone = sum(1 for uid in excluded if uid in holding and uid not in leaving) if excluded else 0
        return len(holding) - len(leaving) - gone

    def alive_count(self, gang_key: str) -> int:
        """Members that count towards the quorum gate: running, or pending and schedulable now."""
        return self.running_count(gang_key) + len(self.members_in("pending", gang_key))

    def started_count(self, gang_key: str) -> int:
        """Members holding capacity that a kubelet took (``status.startTime`` set)."""
        return len(self.members_in("holding", gang_key)) - len(self.members_in("unstarted", gang_key))

    def count(self, pod: PodRecord, sign: int) -> None:
        """Follow a member's record in (``sign`` 1) or out (-1) of its gang's state sets."""
        if not pod.gang_key:
            return
        for name, member in MEMBER_STATES.items():
            if not member(pod):
                continue
            index = self.in_state[name]
            if sign > 0:
                index[pod.gang_key].add(pod.uid)
                continue
            uids = index.get(pod.gang_key)
            if uids is not None:
                uids.discard(pod.uid)
                if not uids:
                    del index[pod.gang_key]

    def check(self, pods: Mapping[str, PodRecord]) -> list[str]:
        """Where the state sets differ from the pods themselves (for the invariants)."""
        expected: dict[str, defaultdict[str, set[str]]] = {name: defaultdict(set) for name in MEMBER_STATES}
        for pod in pods.values():
            if pod.gang_key:
                for name, member in MEMBER_STATES.items():
                    if member(pod):
                        expected[name][pod.gang_key].add(pod.uid)
        return [f"gang index {name}: kept {dict(self.in_state[name])}, the pods say {dict(want)}"
                for name, want in expected.items() if self.in_state[name] != want]
