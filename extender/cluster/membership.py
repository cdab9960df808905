"""Which pods are in which gang, and what the members' own annotations declare of it.

The cache decides a pod's gang (``conventions.py``, ``filing.py``); this index follows the
pod in and out of it, and keeps the members' declarations with ``declarations.py`` (an index entry
is dropped with its last member, so gangs coming and going never grow it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from .conventions import MemberTopology, spec_from_pod, topology_of_pod
from .declarations import Declarations
from .records import GangSpec, PodRecord

T = TypeVar("T")


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
        # Kept as pods change, so the search for partly bound gangs visits only gangs with both.
        self.pending_in: dict[str, set[str]] = defaultdict(set)  # gang key -> members ready for a node
        self.holding_in: dict[str, set[str]] = defaultdict(set)  # gang key -> members holding capacity
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

    def count(self, pod: PodRecord, sign: int) -> None:
        """Follow a member's record in (``sign`` 1) or out (-1) of its gang's pending and holding sets."""
        if not pod.gang_key:
            return
        for index, member in ((self.pending_in, pod.pending), (self.holding_in, pod.holds_capacity)):
            if not member:
                continue
            if sign > 0:
                index[pod.gang_key].add(pod.uid)
                continue
            uids = index.get(pod.gang_key)
            if uids is not None:
                uids.discard(pod.uid)
                if not uids:
                    del index[pod.gang_key]

    def check(self, pods: Mapping[str, PodRecord]) -> list[str]:
        """Where the pending and holding sets differ from the pods themselves (for the invariants)."""
        expected: tuple[dict[str, set[str]], dict[str, set[str]]] = (defaultdict(set), defaultdict(set))
        for pod in pods.values():
            if pod.gang_key:
                for index, member in zip(expected, (pod.pending, pod.holds_capacity), strict=True):
                    if member:
                        index[pod.gang_key].add(pod.uid)
        return [f"gang index {name}: kept {dict(kept)}, the pods say {dict(want)}"
                for name, kept, want in (("pending", self.pending_in, expected[0]),
                                         ("holding", self.holding_in, expected[1])) if kept != want]
