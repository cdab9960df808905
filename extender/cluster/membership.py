"""Which pods are in which gang, and what the members' own annotations declare of it.

The cache decides a pod's gang (``conventions.py``, ``filing.py``); this index follows the
pod in and out of it, and keeps the members' declarations with ``declarations.py`` (an index entry
is dropped with its last member, so gangs coming and going never grow it).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .conventions import MemberTopology, spec_from_pod, topology_of_pod
from .declarations import Declarations
from .records import GangSpec


class Membership:
    def __init__(self, declarations: Declarations) -> None:
        self.gang_members: dict[str, set[str]] = defaultdict(set)
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
        before = self._declarations.spec(gang_key)
        self._declarations.put_member(gang_key, spec, topology)
        after = self._declarations.spec(gang_key)
        # What the annotations declare, not which pod carried them nor when it was created.
        changed = before is not None and after is not None and before.declaration() != after.declaration()
        return gang_key if changed else ""

    def leave(self, uid: str, gang_key: str) -> None:
        members = self.gang_members.get(gang_key)
        if members is None:
            return
        members.discard(uid)
        if not members:
            del self.gang_members[gang_key]
            self._declarations.forget_members(gang_key)
