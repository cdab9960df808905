"""The kinds of API object that declare gangs, each in the versions Quorum can read.

The informer picks, per kind, the first version the apiserver serves (API discovery) and feeds
the cache through that kind's ``GangObjectSource``; kinds not served are simply empty.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .conventions import (
    COSCHEDULING_API,
    NATIVE_GROUP,
    VOLCANO_API,
    spec_from_composite,
    spec_from_crd_podgroup,
    spec_from_native_podgroup,
    specs_from_workload_v1alpha1,
)
from .jobsets import JOBSET_API, JOBSETS, specs_from_jobset
from .records import GangSpec

# Reads one object into the gangs it declares (most declare one; a v1alpha1 Workload several).
Parse = Callable[[Mapping[str, Any]], dict[str, GangSpec]]


@dataclass(frozen=True, slots=True)
class GangObjectSource:
    """One kind of object that declares gangs, in the version the apiserver serves."""

    name: str  # informer kind name: "podgroups", "workloads", "coscheduling", "volcano"
    parse: Parse
    api_version: str = ""
    plural: str = ""

    @property
    def path(self) -> str:
        return f"/apis/{self.api_version}/{self.plural}"


@dataclass(frozen=True, slots=True)
class GangObjectKind:
    """A kind and the versions that can serve it, preferred first."""

    name: str
    plural: str
    versions: tuple[str, ...]
    make: Callable[[str], Parse]

    def source(self, api_version: str) -> GangObjectSource:
        return GangObjectSource(self.name, self.make(api_version), api_version, self.plural)


def _one(read: Callable[[Mapping[str, Any], str], GangSpec]) -> Callable[[str], Parse]:
    def make(api_version: str) -> Parse:
        def parse(obj: Mapping[str, Any]) -> dict[str, GangSpec]:
            spec = read(obj, api_version)
            return {spec.key: spec}
        return parse
    return make


GANG_OBJECT_KINDS = (
    # 1.37 serves v1beta1, 1.36 v1alpha2: the same PodGroup shape. v1 (planned GA in 1.38) is
    # expected to keep it, and is preferred once served: a beta beside it is on its way out.
    GangObjectKind("podgroups", "podgroups",
                   (f"{NATIVE_GROUP}/v1", f"{NATIVE_GROUP}/v1beta1", f"{NATIVE_GROUP}/v1alpha2"),
                   _one(spec_from_native_podgroup)),
    # 1.37 (alpha gate CompositePodGroup): gangs of PodGroups (``composites.py``); beta planned for 1.38.
    GangObjectKind("compositepodgroups", "compositepodgroups",
                   (f"{NATIVE_GROUP}/v1beta1", f"{NATIVE_GROUP}/v1alpha3"), _one(spec_from_composite)),
    # 1.35: gangs are podGroups inside the Workload itself. Later Workloads (v1alpha2 on) hold only
    # templates and declare no gang, whatever their version: their PodGroups do.
    GangObjectKind("workloads", "workloads", (f"{NATIVE_GROUP}/v1alpha1",),
                   lambda _version: specs_from_workload_v1alpha1),
    GangObjectKind("coscheduling", "podgroups", (COSCHEDULING_API,), _one(spec_from_crd_podgroup)),
    GangObjectKind("volcano", "podgroups", (VOLCANO_API,), _one(spec_from_crd_podgroup)),
    # A JobSet that asks for gangs (``quorum.dev/jobset-gang``) declares them itself; last, so that
    # a PodGroup of the same name always wins.
    GangObjectKind(JOBSETS, "jobsets", (JOBSET_API,),
                   lambda version: lambda obj: specs_from_jobset(obj, version)),
)
# Which object wins when several declare the same gang (docs/conventions.md).
OBJECT_PRECEDENCE = tuple(kind.name for kind in GANG_OBJECT_KINDS)
NATIVE_PODGROUPS = GANG_OBJECT_KINDS[0].source(f"{NATIVE_GROUP}/v1beta1")
