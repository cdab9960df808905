"""Which gang a pod is in when a basic PodGroup names it and its own labels name another.

With ``WorkloadWithJob`` (alpha since 1.36) the Job controller writes a Workload and a PodGroup for
every Job whose pod template names none, and points each pod's ``spec.schedulingGroup`` at it. The
PodGroup's policy is ``basic`` (pod by pod) unless the Job's ``spec.scheduling`` asks for a gang. A
basic PodGroup says "no gang", not "this gang": a pod that also carries Quorum's annotations (or
another convention's gang name) belongs to the gang those name. Without this, turning the gate on
would silently schedule every annotated Job pod by pod.

Whether a PodGroup is basic is known only once the watch has delivered it, and that may come
after its pods, or change when it is recreated. So the pods that name both are kept (the last
version of each), and the cache files them again when their PodGroup changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .conventions import gang_key_of_pod, scheduling_group_key, yielding_gang_key
from .declarations import Declarations
from .object_sources import NATIVE_PODGROUPS
from .records import PodRecord


class BasicGroups:
    def __init__(self, declarations: Declarations) -> None:
        self._declarations = declarations
        self._naming: dict[str, dict[str, dict[str, Any]]] = {}  # PodGroup key -> uid -> pod
        self._filed: dict[str, tuple[str, str]] = {}  # uid -> (its PodGroup key, the gang filed in)

    def gang_key(self, uid: str, pod: dict[str, Any]) -> str | None:
        """The gang of the pod (None: none), remembering the pod when its PodGroup's policy decides."""
        self.forget(uid)
        group = scheduling_group_key(pod)
        if group is None:
            return gang_key_of_pod(pod)
        named = yielding_gang_key(pod)  # the gang its own labels name, when not that PodGroup
        if named is None:
            return group
        key = named if self._basic(group) else group
        self._naming.setdefault(group, {})[uid] = pod
        self._filed[uid] = (group, key)
        return key

    def resolve(self, pod: PodRecord) -> PodRecord:
        """A pod kube-scheduler asks about before the watch delivered it, in the gang the cache
        would file it in: its request names its PodGroup, which may be a basic one."""
        if pod.yielding_gang is None or pod.gang_key is None or not self._basic(pod.gang_key):
            return pod
        return replace(pod, gang_key=pod.yielding_gang)

    def forget(self, uid: str) -> None:
        group, _ = self._filed.pop(uid, ("", ""))
        pods = self._naming.get(group)
        if pods is None:
            return
        pods.pop(uid, None)
        if not pods:
            del self._naming[group]

    def misfiled(self, groups: Iterable[str]) -> list[dict[str, Any]]:
        """The remembered pods of these PodGroups that a change of the PodGroups' policy (or their
        arrival or removal) moves to another gang: the cache files them again."""
        out = []
        for group in groups:
            basic = self._basic(group)
            for uid, pod in self._naming.get(group, {}).items():
                if (self._filed[uid][1] != group) != basic:
                    out.append(pod)
        return out

    def _basic(self, group: str) -> bool:
        spec = self._declarations.by_source[NATIVE_PODGROUPS.name].get(group)  # any version
        return spec is not None and not spec.is_gang
