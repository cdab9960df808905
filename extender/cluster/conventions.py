"""Every way users already declare a gang or its topology, read into one ``GangSpec``.

Two kinds of adapter live here:

* **pod conventions** say which gang a pod belongs to (a field, a label or an annotation), and some
  also carry the gang's size on the pod itself (Quorum's, Kueue's and Koordinator's annotations);
* **object conventions** read an API object that declares gangs: the native PodGroup (v1 once
  served, v1beta1 on 1.37, v1alpha2 on 1.36), the v1alpha1 Workload of 1.35 (one gang per podGroup
  and replica key),
  and the coscheduling and Volcano PodGroup CRDs.

A pod that carries several conventions belongs to the first one in ``gang_key_of_pod``'s order;
when several objects declare the same gang, ``OBJECT_PRECEDENCE`` decides
(docs/conventions.md). Topology comes from the declaring object when it names one, else from the members'
annotations (Kueue's TAS annotations, or Quorum's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .gang_sources import (
    ANNOTATION_PREFERRED,
    ANNOTATION_REQUIRED,
    bookkeeping,
    lifecycle_overrides,
    shown_conditions,
    spec_from_annotations,
)
from .records import DisruptionMode, GangHome, GangSpec, PreemptionPolicy, int32
from .resources import QuantityError, parse_resource_list

# --- pod conventions -------------------------------------------------------------------------
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
KOORDINATOR_NAME = "gang.scheduling.koordinator.sh/name"
KOORDINATOR_MIN = "gang.scheduling.koordinator.sh/min-available"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
# Kueue topology-aware scheduling (pod template annotations).
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"

SOURCE_KOORDINATOR = "koordinator annotations"
SOURCE_KUEUE = "kueue pod group"

# --- object conventions ----------------------------------------------------------------------
NATIVE_GROUP = "scheduling.k8s.io"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
COMPOSITE_PREFIX = "composite:"  # gang keys of CompositePodGroups: "namespace/composite:name"


@dataclass(frozen=True, slots=True)
class MemberTopology:
    """Topology a gang's members ask for through annotations (used when the object names none)."""

    required: str | None = None
    preferred: str | None = None
    slice_topology: str | None = None
    slice_size: int = 0
    problem: str = ""


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""),
            meta.get("labels") or {}, meta.get("annotations") or {})


def _uid(obj: Mapping[str, Any]) -> str:
    uid = (obj.get("metadata") or {}).get("uid")
    return uid if isinstance(uid, str) else ""


def gang_key_of_pod(pod: Mapping[str, Any]) -> str | None:
    """The gang a pod belongs to, or None for a pod outside any gang.

    Keys are "namespace/name", except for the v1alpha1 Workload, whose gangs are
    "namespace/workload/podGroup" and, per replica, "namespace/workload/podGroup/replicaKey"
    (names and replica keys are DNS labels or subdomains: they never contain "/").
    """
    group = scheduling_group_key(pod)
    if group:
        return group
    namespace = _meta(pod)[0]
    ref = (pod.get("spec") or {}).get("workloadRef")
    if isinstance(ref, Mapping) and ref.get("name") and ref.get("podGroup"):
        key = f"{namespace}/{ref['name']}/{ref['podGroup']}"
        replica = ref.get("podGroupReplicaKey")
        return f"{key}/{replica}" if replica else key
    return named_gang_key(pod)


def scheduling_group_key(pod: Mapping[str, Any]) -> str | None:
    """The native PodGroup a pod names in ``spec.schedulingGroup`` (1.36+), or None."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return f"{_meta(pod)[0]}/{group}" if group else None


def yielding_gang_key(pod: Mapping[str, Any]) -> str | None:
    """The gang a pod's own labels or annotations name when its ``spec.schedulingGroup`` names
    another PodGroup: the pod's gang if that PodGroup turns out basic (``basic_groups.py``)."""
    group = scheduling_group_key(pod)
    named = named_gang_key(pod) if group else None
    return named if named != group else None


def named_gang_key(pod: Mapping[str, Any]) -> str | None:
    """The gang a pod's own labels or annotations name (Quorum's, coscheduling's, Kueue's,
    Volcano's, Koordinator's, in that order), or None."""
    namespace, _, labels, annotations = _meta(pod)
    for name in (annotations.get("quorum.dev/gang"), labels.get(COSCHEDULING_LABEL),
                 labels.get(KUEUE_GROUP_LABEL), annotations.get(VOLCANO_ANNOTATION),
                 annotations.get(KOORDINATOR_NAME)):
        if name:
            return f"{namespace}/{name}"
    return None


def spec_from_pod(pod: Mapping[str, Any]) -> GangSpec | None:
    """The gang a pod declares by itself (size on the pod), or None when its size lives elsewhere."""
    spec = spec_from_annotations(pod)
    if spec is not None:
        return spec
    namespace, _, labels, annotations = _meta(pod)
    for name_key, count_key, source, where in (
            (KUEUE_GROUP_LABEL, KUEUE_GROUP_COUNT, SOURCE_KUEUE, labels),
            (KOORDINATOR_NAME, KOORDINATOR_MIN, SOURCE_KOORDINATOR, annotations)):
        name = where.get(name_key)
        if name and count_key in annotations:
            count, problem = _positive(annotations[count_key], count_key)
            meta = pod.get("metadata") or {}
            return GangSpec(**lifecycle_overrides(annotations), **bookkeeping(annotations),
                            key=f"{namespace}/{name}", min_count=count, problem=problem,
                            priority=int32((pod.get("spec") or {}).get("priority")),
                            created=str(meta.get("creationTimestamp") or ""), source=source)
    return None


def topology_of_pod(pod: Mapping[str, Any]) -> MemberTopology | None:
    """Topology asked for by a member's annotations (Kueue TAS, then Quorum's); None when none."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    required, preferred = _asked_levels(annotations)
    slice_level = annotations.get(KUEUE_SLICE_REQUIRED) or None
    if not (required or preferred or slice_level):
        return None
    size, problem = _slice_size(annotations, slice_level)
    return MemberTopology(_text(required), _text(preferred), _text(slice_level), size, problem)


def _asked_levels(annotations: Mapping[str, Any]) -> tuple[Any, Any]:
    """The (required, preferred) levels of Kueue's annotations, else Quorum's; Kueue's
    "unconstrained" asks for none."""
    required = annotations.get(KUEUE_REQUIRED) or annotations.get(ANNOTATION_REQUIRED) or None
    preferred = annotations.get(KUEUE_PREFERRED) or annotations.get(ANNOTATION_PREFERRED) or None
    if KUEUE_UNCONSTRAINED in annotations and str(annotations[KUEUE_UNCONSTRAINED]).lower() == "true":
        return None, None  # Kueue's "anywhere": no topology
    return required, preferred


def _slice_size(annotations: Mapping[str, Any], slice_level: Any) -> tuple[int, str]:
    """The pods per slice (and what is wrong with it): only a slice level gives it a meaning."""
    if slice_level:
        return _positive(annotations.get(KUEUE_SLICE_SIZE, ""), KUEUE_SLICE_SIZE)
    if KUEUE_SLICE_SIZE in annotations:
        return 0, f"{KUEUE_SLICE_SIZE} is set without {KUEUE_SLICE_REQUIRED}"
    return 0, ""


def _text(value: Any) -> str | None:
    return str(value) if value else None


def with_topology(spec: GangSpec, topology: MemberTopology) -> GangSpec:
    """Fill in the topology the declaration leaves open; what it names itself stays."""
    changes: dict[str, Any] = {}
    if spec.required_topology is None and topology.required:
        changes["required_topology"] = topology.required
    if spec.preferred_topology is None and topology.preferred:
        changes["preferred_topology"] = topology.preferred
    if spec.slice_topology is None and topology.slice_topology:
        changes["slice_topology"] = topology.slice_topology
        changes["slice_size"] = topology.slice_size
    if topology.problem and not spec.problem:
        changes["problem"] = topology.problem
    return replace(spec, **changes) if changes else spec


def declared_by_pod(pod: Mapping[str, Any]) -> GangSpec | None:
    """What one pod alone says of its gang (for a request that arrives before the watch)."""
    spec = spec_from_pod(pod)
    topology = topology_of_pod(pod) if spec is not None else None
    return with_topology(spec, topology) if spec is not None and topology is not None else spec


def _positive(raw: Any, what: str) -> tuple[int, str]:
    """A positive integer, or 0 and why not (the gang is then Misconfigured, never guessed at)."""
    try:
        value = int(str(raw))
    except ValueError:
        value = 0
    return (value, "") if value >= 1 else (0, f"{what} {str(raw)[:64]!r} is not a positive integer")


# --- object adapters -------------------------------------------------------------------------
def _policy(policy: Any) -> tuple[int, bool]:
    """(minCount, is_gang) of a native scheduling policy: ``basic`` (or none) is not a gang."""
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    if not isinstance(gang, Mapping):
        return 1, False
    count = gang.get("minCount")
    if isinstance(count, bool) or not isinstance(count, int):
        raise ValueError(f"gang.minCount {str(count)[:64]!r} is not an integer")  # the object is skipped
    return int32(count), True


def _disruption(raw: Any) -> DisruptionMode:
    """A native ``spec.disruptionMode``: the v1beta1 union ``{single: {}}`` / ``{all: {}}``, or the
    1.36 string ``Pod`` / ``PodGroup``. Absent (1.37's apiserver always fills ``single`` in, so only
    older objects lack it) is whole-gang, as Quorum has always evicted gangs."""
    if isinstance(raw, Mapping):
        return DisruptionMode.SINGLE if raw.get("single") is not None and raw.get("all") is None \
            else DisruptionMode.ALL
    return DisruptionMode.SINGLE if raw == "Pod" else DisruptionMode.ALL


def _preemption_policy(raw: Any) -> PreemptionPolicy:
    """A native ``spec.preemptionPolicy`` (alpha gate ``PodGroupPreemptionPolicy``); absent preempts."""
    never = raw == PreemptionPolicy.NEVER.value
    return PreemptionPolicy.NEVER if never else PreemptionPolicy.PREEMPT_LOWER_PRIORITY


def spec_from_native_podgroup(obj: Mapping[str, Any], api_version: str) -> GangSpec:
    """A ``scheduling.k8s.io`` PodGroup: v1 (planned for 1.38, assumed to keep the shape), v1beta1
    (1.37) or v1alpha2 (1.36), the same shape."""
    namespace, name, _, annotations = _meta(obj)
    spec = obj.get("spec") or {}
    min_count, is_gang = _policy(spec.get("schedulingPolicy"))
    return GangSpec(
        **lifecycle_overrides(annotations), **bookkeeping(annotations),
        key=f"{namespace}/{name}", min_count=min_count if is_gang else 1, is_gang=is_gang,
        required_topology=_required(spec), priority=int32(spec.get("priority")),
        disruption=_disruption(spec.get("disruptionMode")),
        preemption_policy=_preemption_policy(spec.get("preemptionPolicy")),
        parent=_text(spec.get("parentCompositePodGroupName")) or "",
        created=str((obj.get("metadata") or {}).get("creationTimestamp") or ""),
        source=f"{api_version} PodGroup", shown=shown_conditions(obj),
        home=GangHome(api_version, "PodGroup", "podgroups", namespace, name, conditions=True,
                      uid=_uid(obj)),
    )


def spec_from_composite(obj: Mapping[str, Any], api_version: str) -> GangSpec:
    """A ``scheduling.k8s.io/v1alpha3`` CompositePodGroup (1.37, gate ``CompositePodGroup``): what
    the composite itself says. Its parts and its total come from its children (``composites.py``)."""
    namespace, name, _, annotations = _meta(obj)
    spec = obj.get("spec") or {}
    is_gang, min_groups, problem = _group_policy(spec.get("schedulingPolicy"))
    return GangSpec(
        **lifecycle_overrides(annotations), **bookkeeping(annotations),
        key=composite_key(namespace, name), min_count=1, is_gang=is_gang, min_parts=min_groups,
        problem=problem, required_topology=_required(spec), priority=int32(spec.get("priority")),
        disruption=_disruption(spec.get("disruptionMode")),
        preemption_policy=_preemption_policy(spec.get("preemptionPolicy")),
        parent=_text(spec.get("parentCompositePodGroupName")) or "",
        created=str((obj.get("metadata") or {}).get("creationTimestamp") or ""),
        source=f"{api_version} CompositePodGroup", shown=shown_conditions(obj),
        home=GangHome(api_version, "CompositePodGroup", "compositepodgroups", namespace, name,
                      conditions=True, uid=_uid(obj)),
    )


def _group_policy(policy: Any) -> tuple[bool, int, str]:
    """(is_gang, minGroupCount, what is wrong with it) of a composite's scheduling policy."""
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    if not isinstance(gang, Mapping):
        return False, 0, ""
    count = gang.get("minGroupCount")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return True, 0, f"gang.minGroupCount {str(count)[:64]!r} is not a positive integer"
    return True, int32(count), ""


def _required(spec: Mapping[str, Any]) -> str | None:
    """The node label of a native ``schedulingConstraints.topology[0].key``, if any."""
    topology = (spec.get("schedulingConstraints") or {}).get("topology") or []
    required = topology[0].get("key") if topology and isinstance(topology[0], Mapping) else None
    return str(required) if required else None


def composite_key(namespace: str, name: str) -> str:
    """The gang key of a CompositePodGroup: ``:`` is in no object name, so it meets no other key."""
    return f"{namespace}/{COMPOSITE_PREFIX}{name}"


def specs_from_workload_v1alpha1(obj: Mapping[str, Any]) -> dict[str, GangSpec]:
    """A ``scheduling.k8s.io/v1alpha1`` Workload (1.35): one gang per podGroup, keyed
    "namespace/workload/podGroup"; replicas of a podGroup are gangs of the same spec."""
    namespace, name, _, annotations = _meta(obj)
    created = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    out: dict[str, GangSpec] = {}
    for group in (obj.get("spec") or {}).get("podGroups") or ():
        if not isinstance(group, Mapping) or not group.get("name"):
            continue
        min_count, is_gang = _policy(group.get("policy"))
        key = f"{namespace}/{name}/{group['name']}"
        out[key] = GangSpec(**lifecycle_overrides(annotations), key=key,
                            min_count=min_count if is_gang else 1, is_gang=is_gang, created=created,
                            source="scheduling.k8s.io/v1alpha1 Workload")
    return out


def spec_from_crd_podgroup(obj: Mapping[str, Any], api_version: str) -> GangSpec:
    """A coscheduling (``scheduling.x-k8s.io/v1alpha1``) or Volcano (``scheduling.volcano.sh/
    v1beta1``) PodGroup: ``minMember``, ``minResources``; coscheduling's ``scheduleTimeoutSeconds``
    is how long the gang may wait at the bind for its quorum."""
    namespace, name, _, annotations = _meta(obj)
    spec = obj.get("spec") or {}
    min_count, problem = _positive(spec.get("minMember", ""), "spec.minMember")
    try:
        min_resources = tuple(sorted(parse_resource_list(spec.get("minResources")).items()))
    except QuantityError as exc:
        min_resources, problem = (), problem or f"spec.minResources: {exc}"
    timeout = spec.get("scheduleTimeoutSeconds")
    bind_timeout = float(timeout) if isinstance(timeout, int) and not isinstance(timeout, bool) \
        and 0 < timeout < 86400 * 365 else None
    kind = "coscheduling" if api_version == COSCHEDULING_API else "Volcano"
    return GangSpec(
        **lifecycle_overrides(annotations), **bookkeeping(annotations),
        key=f"{namespace}/{name}", min_count=min_count, problem=problem,
        min_resources=tuple((k, v) for k, v in min_resources if v > 0 and k != "pods"),
        bind_timeout=bind_timeout,
        created=str((obj.get("metadata") or {}).get("creationTimestamp") or ""),
        source=f"{api_version} PodGroup ({kind})",
        home=GangHome(api_version, "PodGroup", "podgroups", namespace, name, uid=_uid(obj)),
    )
