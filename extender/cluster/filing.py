"""Which gang a pod is filed in when that depends on objects other than the pod itself.

Most pods name their gang (``conventions.py``). Three kinds of object change that answer, and may
arrive after the pods they concern: a basic native PodGroup yields its pods to the gang their own
labels name (``basic_groups.py``), a PodGroup under a CompositePodGroup is part of the composite's
gang (``composites.py``), and a JobSet decides which gang its pods form (``jobsets.py``). This is
the one place that combines them, for the cache (pods the watch delivered) and for requests about
pods it has not delivered yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .basic_groups import BasicGroups
from .composites import CompositeFiling
from .conventions import MemberTopology
from .declarations import Declarations
from .jobsets import JOBSETS, JobSetFiling
from .records import PodRecord


@dataclass(slots=True)
class Refiling:
    """What an object's change moves: pods to read again (their whole object is kept), and pods
    whose key alone changes (uid, new key or None)."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    moves: list[tuple[str, str | None]] = field(default_factory=list)


class PodFiling:
    def __init__(self, declarations: Declarations) -> None:
        self.basic_groups = BasicGroups(declarations)
        self.jobsets = JobSetFiling()
        self.composites = CompositeFiling(declarations.composites)

    def gang_key(self, uid: str, pod: dict[str, Any]) -> str | None:
        """The gang the cache files a delivered pod in (None: none)."""
        key = self.composites.gang_key(uid, pod, self.basic_groups.gang_key(uid, pod))
        return self.jobsets.gang_key(uid, pod, key)

    def forget(self, uid: str) -> None:
        self.basic_groups.forget(uid)
        self.composites.forget(uid)
        self.jobsets.forget(uid)

    def topology(self, uid: str) -> MemberTopology | None:
        """What a pod moved by ``Refiling.moves`` asks of its gang's topology."""
        return self.jobsets.topology(uid)

    def resolve(self, pod: PodRecord) -> PodRecord:
        """A pod kube-scheduler asks about before the watch delivered it, in the gang the cache
        would file it in."""
        pod = self.composites.resolve(self.basic_groups.resolve(pod))
        if pod.gang_key is None and pod.jobset is not None:
            key = self.jobsets.key_of(pod.jobset)
            if key is not None:
                return replace(pod, gang_key=key)
        return pod

    def object_changed(self, kind: str, ident: str, obj: dict[str, Any] | None,
                       keys: Sequence[str]) -> Refiling:
        """A gang object arrived, changed or (``obj`` None) went; ``keys`` it declared or stopped
        declaring."""
        out = Refiling(pods=self.basic_groups.misfiled(keys))
        reread = {(pod.get("metadata") or {}).get("uid") for pod in out.pods}  # filed again anyway
        out.moves.extend(move for move in self.composites.moves(kind, ident, keys) if move[0] not in reread)
        if kind == JOBSETS:
            out.moves.extend(self.jobsets.put(ident, obj))
        return out

    def kind_listed(self, kind: str, served: bool) -> Refiling:
        """A kind of gang object was listed (``served``) or found not served."""
        moves: Iterable[tuple[str, str | None]] = self.jobsets.set_watching(served) if kind == JOBSETS else ()
        return Refiling(moves=list(moves))
