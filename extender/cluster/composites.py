"""Composite gangs: CompositePodGroups and the PodGroups under them (1.37, alpha gate
``CompositePodGroup``).

A CompositePodGroup (``scheduling.k8s.io/v1alpha3``) groups PodGroups, whose
``spec.parentCompositePodGroupName`` names it, and other composites. Quorum schedules the topmost
gang composite of a tree as one gang, keyed "namespace/composite:name": its members are the pods of
every PodGroup under it, each PodGroup a *part* with its own minCount (``GangPart``, and the pods'
``PodRecord.part``). Nothing of it binds until every part can, the composite's required topology
holds them all and each part's own holds that part.

Pods, PodGroups and composites arrive in any order. A PodGroup naming a composite not seen yet files
its pods under that composite's key: the gang waits for it to exist instead of binding its part
alone. Pods are filed again whenever the tree changes.

Not done yet: a composite in the middle of a tree adds no constraint of its own (the topmost gang
composite's and the PodGroups' are honoured), and Quorum waits for every child PodGroup it knows
(and for ``minGroupCount`` of them at least), not for any ``minGroupCount`` of more. Planning part
by part is in ``gang/parts.py`` and ``topology/composite.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from .conventions import COMPOSITE_PREFIX, composite_key, scheduling_group_key
from .records import GangPart, GangSpec, PodRecord

COMPOSITES = "compositepodgroups"  # the informer's kind name
PODGROUPS = "podgroups"


def is_composite_key(key: str) -> bool:
    return key.partition("/")[2].startswith(COMPOSITE_PREFIX)


def _namespace(key: str) -> str:
    return key.partition("/")[0]


class CompositeTree:
    """Which composite gang each PodGroup is part of. Reads the declarations' own tables (live)."""

    def __init__(self, podgroups: Mapping[str, GangSpec], composites: Mapping[str, GangSpec]) -> None:
        self._podgroups = podgroups
        self._composites = composites
        self._children: dict[str, set[str]] = {}  # namespace -> PodGroups that name a parent

    def podgroup_changed(self, key: str) -> None:
        spec = self._podgroups.get(key)
        namespace = _namespace(key)
        children = self._children.setdefault(namespace, set())
        if spec is not None and spec.parent:
            children.add(key)
        else:
            children.discard(key)
            if not children:
                del self._children[namespace]

    def root_of(self, group: str) -> str | None:
        """The composite gang a PodGroup is part of, or None. Up the tree, the topmost gang
        composite wins; a parent not seen yet is where the walk stops (its key: the pods wait)."""
        spec = self._podgroups.get(group)
        if spec is None or not spec.parent:
            return None
        namespace = _namespace(group)
        root: str | None = None
        name, seen = spec.parent, set()
        while name and name not in seen:
            seen.add(name)
            key = composite_key(namespace, name)
            composite = self._composites.get(key)
            if composite is None:
                return key
            if composite.is_gang:
                root = key
            name = composite.parent
        return root

    def groups_in(self, namespace: str) -> list[str]:
        return sorted(self._children.get(namespace, ()))

    def roots_in(self, namespace: str) -> set[str]:
        return {root for group in self.groups_in(namespace) if (root := self.root_of(group))}

    def complete(self, spec: GangSpec) -> GangSpec:
        """A composite's declaration with its parts, its total and its priority from its PodGroups."""
        children = [(key, self._podgroups[key]) for key in self.groups_in(_namespace(spec.key))
                    if self.root_of(key) == spec.key]
        parts = tuple(GangPart(key, child.min_count if child.is_gang else 0, child.required_topology,
                               child.home) for key, child in children)
        priority = max([spec.priority, *(child.priority for _, child in children)])
        # A PodGroup of the ``minGroupCount`` not seen yet needs one member at least: the composite
        # is not at quorum (nor running at it) while one is missing.
        total = sum(p.min_count for p in parts) + max(0, spec.min_parts - len(parts))
        return replace(spec, parts=parts, min_count=max(1, total), priority=priority)


def parts_short(spec: GangSpec, members: Iterable[PodRecord]) -> str:
    """Why these members do not make up every part of a composite gang ("" when they do, and for
    every other gang). ``members`` are those that count (alive, or held and running)."""
    if not spec.min_parts:
        return ""
    counts = Counter(m.part for m in members)
    if len(spec.parts) < spec.min_parts:
        return f"{len(spec.parts)}/{spec.min_parts} PodGroups exist"
    short = [f"{p.key.partition('/')[2]} {counts.get(p.key, 0)}/{p.min_count}"
             for p in spec.parts if counts.get(p.key, 0) < p.min_count]
    return f"PodGroups short of their minCount: {', '.join(short)}" if short else ""


def quorum_count(spec: GangSpec, members: Iterable[PodRecord]) -> int:
    """The members that count towards a composite's minCount: in each part, up to its own."""
    counts = Counter(m.part for m in members)
    return sum(min(counts[p.key], p.min_count) for p in spec.parts)


class CompositeFiling:
    """Files the pods of a composite's PodGroups under the composite, and again when the tree moves."""

    def __init__(self, tree: CompositeTree) -> None:
        self._tree = tree
        self._by_group: dict[str, set[str]] = {}  # PodGroup key -> uids of the pods filed by it
        self._group_of: dict[str, str] = {}

    def gang_key(self, uid: str, pod: Mapping[str, Any], key: str | None) -> str | None:
        """The gang of a pod ``key`` was decided for so far: its composite when its PodGroup has one."""
        self.forget(uid)
        if key is None or key != scheduling_group_key(pod):
            return key  # no PodGroup, or another gang's pod (a basic PodGroup yields it)
        self._by_group.setdefault(key, set()).add(uid)
        self._group_of[uid] = key
        return self._tree.root_of(key) or key

    def resolve(self, pod: PodRecord) -> PodRecord:
        """A pod kube-scheduler asks about before the watch delivered it, under its composite."""
        if pod.gang_key is None or pod.gang_key != pod.part:
            return pod
        root = self._tree.root_of(pod.gang_key)
        return replace(pod, gang_key=root) if root else pod

    def forget(self, uid: str) -> None:
        group = self._group_of.pop(uid, None)
        if group is None:
            return
        uids = self._by_group[group]
        uids.discard(uid)
        if not uids:
            del self._by_group[group]

    def moves(self, kind: str, ident: str, keys: Iterable[str]) -> list[tuple[str, str | None]]:
        """The pods whose gang a changed PodGroup or composite moves: (uid, gang key)."""
        if kind == COMPOSITES:
            namespace = _namespace(ident)
            groups: Iterable[str] = [g for g in self._by_group if _namespace(g) == namespace]
        elif kind == PODGROUPS:
            groups = [k for k in keys if k in self._by_group]
        else:
            return []
        return [(uid, self._tree.root_of(group) or group) for group in groups
                for uid in sorted(self._by_group.get(group, ()))]
