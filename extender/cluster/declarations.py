"""Which gangs exist and what each asks for, merged from every convention at once.

Gangs are declared by API objects (PodGroups of three APIs, v1alpha1 Workloads) and by the pods
themselves (annotations). This is the one place that decides which declaration wins:

1. objects, in ``precedence`` order (the first source that declares the key);
2. the declaration the members carry (annotations; the most recent member's);
3. topology the declaration leaves open is taken from the members' topology annotations.

A v1alpha1 Workload declares "namespace/workload/podGroup"; each replica key of that podGroup is
a gang of its own ("namespace/workload/podGroup/replica") with the same spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from .composites import COMPOSITES, PODGROUPS, CompositeTree
from .conventions import MemberTopology, with_topology
from .object_sources import GangObjectSource
from .records import GangSpec


def object_id(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def template_key(key: str) -> str | None:
    """The podGroup a replica gang belongs to ("ns/workload/podGroup"), or None for other keys."""
    parts = key.split("/")
    return "/".join(parts[:3]) if len(parts) == 4 else None


class Declarations:
    def __init__(self, precedence: Iterable[str]) -> None:
        self.precedence = tuple(precedence)
        self.by_source: dict[str, dict[str, GangSpec]] = {name: {} for name in self.precedence}
        # Per source and object ("namespace/name"): the gang keys it declares, to forget them.
        self.keys_of: dict[str, dict[str, tuple[str, ...]]] = {name: {} for name in self.precedence}
        self.from_members: dict[str, GangSpec] = {}
        self.member_topology: dict[str, MemberTopology] = {}
        self._resolved: dict[str, GangSpec | None] = {}
        self.composites = CompositeTree(self.by_source.get(PODGROUPS, {}), self.by_source.get(COMPOSITES, {}))

    # --- queries (hot path: memoised until a declaration moves) ------------------------------
    def spec(self, key: str) -> GangSpec | None:
        try:
            return self._resolved[key]
        except KeyError:
            pass
        spec = self._resolve(key)
        self._resolved[key] = spec
        return spec

    def declared_by_object(self, key: str) -> bool:
        """Whether an API object (not the members' annotations) declares the gang."""
        template = template_key(key)
        return any(key in self.by_source[name] or (template is not None and template in self.by_source[name])
                   for name in self.precedence)

    def object_count(self) -> int:
        return sum(len(specs) for specs in self.by_source.values())

    def _resolve(self, key: str) -> GangSpec | None:
        spec = self._from_objects(key)
        if spec is None:
            spec = self.from_members.get(key)
        if spec is None:
            return None
        if spec.min_parts:
            return self.composites.complete(spec)
        topology = self.member_topology.get(key)
        if topology is not None:
            spec = with_topology(spec, topology)
        return spec

    def _from_objects(self, key: str) -> GangSpec | None:
        template = template_key(key)
        for name in self.precedence:
            specs = self.by_source[name]
            spec = specs.get(key)
            if spec is not None:
                return spec
            if template is not None:
                spec = specs.get(template)
                if spec is not None:
                    return replace(spec, key=key)
        return None

    # --- objects ---------------------------------------------------------------------------
    def put_object(self, source: GangObjectSource, obj: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """Take one object; returns (gang keys it declares now, and the composite gangs whose spec
        moves with it; keys it no longer declares)."""
        specs = source.parse(obj)
        ident = object_id(obj)
        before = self.keys_of[source.name].get(ident, ())
        gone = [key for key in before if key not in specs]
        roots = self._roots(source.name, ident, [*specs, *gone])
        table = self.by_source[source.name]
        for key in gone:
            table.pop(key, None)
        table.update(specs)
        if specs:
            self.keys_of[source.name][ident] = tuple(specs)
        else:
            self.keys_of[source.name].pop(ident, None)
        self._tree_changed(source.name, [*specs, *gone])
        self._resolved.clear()
        roots |= self._roots(source.name, ident, [*specs, *gone])
        return [*specs, *sorted(roots.difference(specs, gone))], gone

    def drop_object(self, source_name: str, ident: str) -> tuple[list[str], list[str]]:
        """Forget one object; returns (the gang keys it declared, the composite gangs it was part of
        or held, whose spec moves with it)."""
        keys = self.keys_of[source_name].pop(ident, ())
        roots = self._roots(source_name, ident, keys)
        table = self.by_source[source_name]
        for key in keys:
            table.pop(key, None)
        self._tree_changed(source_name, keys)
        self._resolved.clear()
        return list(keys), sorted(roots.difference(keys))

    def _roots(self, source_name: str, ident: str, keys: Iterable[str]) -> set[str]:
        """The composite gangs whose parts a change of these objects can move (their spec follows)."""
        if source_name == PODGROUPS:
            return {root for key in keys if (root := self.composites.root_of(key))}
        if source_name == COMPOSITES:
            return self.composites.roots_in(ident.partition("/")[0])
        return set()

    def _tree_changed(self, source_name: str, keys: Iterable[str]) -> None:
        if source_name == PODGROUPS:
            for key in keys:
                self.composites.podgroup_changed(key)

    def objects_of(self, source_name: str) -> list[str]:
        return list(self.keys_of[source_name])

    # --- members ---------------------------------------------------------------------------
    def put_member(self, key: str, spec: GangSpec | None, topology: MemberTopology | None) -> None:
        """The declaration and topology one member carries (the latest member's win). Every event
        of every member comes here: the resolved spec is recomputed only when something moved."""
        changed = False
        if spec is not None:
            before = self.from_members.get(key)
            if before is not None:
                spec = _keep_bookkeeping(spec, before)
            if spec != before:
                self.from_members[key] = spec
                changed = True
        if topology is not None and topology != self.member_topology.get(key):
            self.member_topology[key] = topology
            changed = True
        if changed:
            self._resolved.pop(key, None)

    def forget_members(self, key: str) -> None:
        """The gang has no members left: what they declared goes with them."""
        self.from_members.pop(key, None)
        self.member_topology.pop(key, None)
        self._resolved.pop(key, None)


def _keep_bookkeeping(spec: GangSpec, before: GangSpec) -> GangSpec:
    """Quorum's requeue count for an annotation gang is on its members: a member created since
    (not stamped yet) does not lower it."""
    if (spec.requeues, spec.backoff_until) >= (before.requeues, before.backoff_until):
        return spec
    return replace(spec, requeues=max(spec.requeues, before.requeues),
                   backoff_until=max(spec.backoff_until, before.backoff_until))
