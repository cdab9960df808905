"""Compact records kept in the cache instead of full API objects.

A 50,000-pod cache of full objects costs gigabytes; these records hold only what placement,
quorum and scoring read, already converted to integers and tuples.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..topology.apart import MembersApart
from .affinity import members_apart
from .dra.demand import pod_claim_refs
from .resources import PODS, Resources, parse_resource_list, pod_requests


@dataclass(frozen=True, slots=True)
class SharedClaim:
    """A claim several members of one gang share (a PodGroup's ``spec.resourceClaims`` entry, or one
    ResourceClaim the members all name): allocated once, so its devices count once for the gang,
    carried by one member (``carrier``), and every member using it runs on the node holding them."""

    key: str  # "namespace/name" of the ResourceClaim
    carrier: bool  # this pod carries the claim's demand for the gang


@dataclass(slots=True)
class NodeRecord:
    name: str
    domains: tuple[str, ...]  # one value per topology level, highest first; "" when unlabelled
    allocatable: Resources
    pods_allocatable: int
    # Interned string key of the domain at each depth ("b0", "b0/b0-r1", ...); "" where a label is
    # missing. Strings cache their hash, which keeps per-node lookups on the request path cheap.
    paths: tuple[str, ...] = ()
    ready: bool = True  # the node's Ready condition (a node that reports none is taken as ready)
    hostname: str = ""  # its kubernetes.io/hostname label (its name when it has none)


@dataclass(frozen=True, slots=True)
class JobSetMember:
    """Where a pod stands in its JobSet, from the labels JobSet gave it (``jobsets.py``)."""

    namespace: str
    jobset: str
    replicated_job: str
    job_index: int
    attempt: int

    @property
    def jobset_key(self) -> str:
        return f"{self.namespace}/{self.jobset}"


@dataclass(slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node_name: str
    requests: Resources
    terminal: bool
    deleting: bool
    gang_key: str | None
    scheduler_name: str = ""
    gated: bool = False  # spec.schedulingGates set: kube-scheduler will not try it yet
    ready: bool = False  # its Ready condition is True
    succeeded: bool = False  # phase Succeeded (terminal, and not a failure)
    priority: int = 0  # spec.priority (admission resolves priorityClassName into it)
    preempts: bool = True  # spec.preemptionPolicy is not Never
    nominated_node: str = ""  # status.nominatedNodeName: where kube-scheduler's preemption made room
    started: bool = False  # status.startTime set: a kubelet took the pod (init containers may still run)
    unschedulable: bool = False  # PodScheduled=False/Unschedulable: kube-scheduler tried and found no node
    consumes: str = ""  # the ProvisioningRequest it consumes (cluster-autoscaler leaves its room to that)
    apart: MembersApart | None = None  # how it repels its gang mates (required anti-affinity), if at all
    rank: tuple[int, ...] = ()  # (job, completion index) of an Indexed Job's pod; () when it has none
    yielding_gang: str | None = None  # its labels' gang, if its PodGroup is basic (basic_groups.py)
    jobset: JobSetMember | None = None  # a JobSet's pod that names no gang: its JobSet decides (requests)
    node_selector: tuple[tuple[str, str], ...] = ()  # spec.nodeSelector, sorted (pins.py reads it)
    kueue_admitted: bool = False  # Kueue admitted its workload: Kueue owns its readiness requeue
    part: str = ""  # the native PodGroup its spec.schedulingGroup names ("ns/name"; a composite's part)
    # A device claim it shares with its gang mates (dra/inventory.py): they all run on one node.
    shared_claim: SharedClaim | None = None
    # (claim, template) per spec.resourceClaims entry: a pod known only from kube-scheduler's request
    # is given the demand these would have (dra/accounting.py), since the cache has not counted it.
    claim_refs: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_capacity(self) -> bool:
        """Bound pods count against their node until they reach a terminal phase."""
        return bool(self.node_name) and not self.terminal

    @property
    def pending(self) -> bool:
        """Ready for a node: not bound, finished, being deleted or held back by a scheduling gate."""
        return not self.node_name and not self.terminal and not self.deleting and not self.gated

    @property
    def counts_for_quorum(self) -> bool:
        """Bound, or pending and schedulable now. Gated pods wait outside the gang (as with
        kube-scheduler's own PreEnqueue), so a gang never reserves capacity for a pod that a
        queueing controller may hold back for a long time."""
        return self.holds_capacity or self.pending


@dataclass(frozen=True, slots=True)
class GangHome:
    """The API object that declares one gang and nothing else: Quorum's Events are about it, and
    its requeue bookkeeping (and, for the native PodGroup, its conditions) are written on it.

    A gang without a home (pod annotations, or one podGroup of a v1alpha1 Workload, which declares
    several gangs at once) keeps its bookkeeping on its members instead."""

    api_version: str  # "scheduling.k8s.io/v1beta1", "scheduling.x-k8s.io/v1alpha1", ...
    kind: str
    plural: str
    namespace: str
    name: str
    conditions: bool = False  # Quorum owns conditions in its status (native PodGroups only)
    # For owner references (the gang-started ConfigMap goes with its PodGroup); not part of which
    # object it is by name, so a home compares equal before and after its uid is known.
    uid: str = field(default="", compare=False)

    @property
    def path(self) -> str:
        """The object's URL path on the apiserver."""
        return f"/apis/{self.api_version}/namespaces/{self.namespace}/{self.plural}/{self.name}"


class DisruptionMode(Enum):
    """How a gang's running members may be disrupted (a native PodGroup's ``spec.disruptionMode``)."""

    ALL = "All"  # the gang goes whole or not at all (every other gang convention, and the default)
    SINGLE = "Single"  # member by member: the owner accepts a gang left below its quorum


class PreemptionPolicy(Enum):
    """Whether a gang may displace lower-priority work (a native PodGroup's ``spec.preemptionPolicy``)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


@dataclass(frozen=True, slots=True)
class GangPart:
    """One PodGroup of a composite gang (a CompositePodGroup's child): its members bind only with
    the whole composite, and each part needs its own minCount, inside its own topology domain."""

    key: str  # the PodGroup, "namespace/name" (its members' ``PodRecord.part``)
    min_count: int
    required_topology: str | None = None
    home: GangHome | None = None  # the PodGroup: it shows its composite's conditions


@dataclass(frozen=True, slots=True)
class GangSpec:
    """One gang, whatever API declared it."""

    key: str  # "namespace/name"
    min_count: int
    is_gang: bool = True  # False for a PodGroup with the basic policy
    required_topology: str | None = None  # level name or node label key
    preferred_topology: str | None = None
    # Slices: groups of ``slice_size`` members, each inside one domain of ``slice_topology``.
    slice_topology: str | None = None
    slice_size: int = 0
    # Resources the whole gang needs at least (coscheduling ``minResources``): checked against
    # the free capacity of the candidate nodes before any placement is searched.
    min_resources: tuple[tuple[str, int], ...] = ()
    bind_timeout: float | None = None  # per-gang override of gang.bindTimeoutSeconds
    home: GangHome | None = None
    priority: int = 0
    created: str = ""
    source: str = "annotation"
    problem: str = ""  # why the declaration is invalid ("" when it is valid): the gang is Misconfigured
    pods_ready_timeout: float | None = None  # per-gang override of lifecycle.podsReadyTimeoutSeconds
    recovery_timeout: float | None = None  # per-gang override of lifecycle.recoveryTimeoutSeconds
    replace_outside_domain: bool | None = None  # per-gang override of lifecycle.replaceOutsideDomain
    started_configmap: str = ""  # the ConfigMap Quorum writes once every member started ("" = none)
    disruption: DisruptionMode = DisruptionMode.ALL
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    # A native PodGroup that is a CompositePodGroup's child: the composite it names ("" for none).
    parent: str = ""
    # A composite gang (``composites.py``): its PodGroups, and how many of them it needs.
    parts: tuple[GangPart, ...] = ()
    min_parts: int = 0
    # Quorum's own bookkeeping, kept on the PodGroup so that it survives a restart (not declared
    # by the user: a change here is not a declaration change).
    requeues: int = 0
    backoff_until: float = 0.0  # wall-clock seconds
    deactivated: str = ""
    # The object's status conditions, (type, True?, reason, message) (``gang_sources.shown_conditions``).
    shown: tuple[tuple[str, bool, str, str], ...] = ()

    def declaration(self) -> tuple[object, ...]:
        """What the user declared: a change here re-derives the gang (and reactivates it)."""
        return (self.min_count, self.is_gang, self.required_topology, self.preferred_topology,
                self.slice_topology, self.slice_size, self.min_resources, self.bind_timeout,
                self.problem, self.pods_ready_timeout, self.recovery_timeout, self.replace_outside_domain,
                self.started_configmap, self.disruption, self.preemption_policy, self.parent, self.parts,
                self.min_parts)


def node_record(obj: dict[str, Any], level_labels: tuple[str, ...]) -> NodeRecord:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    allocatable = parse_resource_list(status.get("allocatable"))
    pods = allocatable.pop(PODS, 110)
    name = meta.get("name", "")
    # A node is its own host: kubelets label it so, but nodes made otherwise (cluster-autoscaler's
    # kwok provider, hand-written Node objects) may lack the label; their host is their name.
    domains = tuple(str(labels.get(label) or (name if label == HOSTNAME_LABEL else ""))
                    for label in level_labels)
    return NodeRecord(
        name=name,
        domains=domains,
        allocatable=allocatable,
        pods_allocatable=pods,
        paths=domain_paths(domains),
        ready=_condition(status, "Ready") not in ("False", "Unknown"),
        hostname=str(labels.get(HOSTNAME_LABEL) or name),
    )


def _condition(status: dict[str, Any], kind: str) -> str:
    """The status ("True", "False", "Unknown") of one condition, or "" when it is absent."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == kind:
            return str(condition.get("status") or "")
    return ""


def domain_paths(domains: tuple[str, ...]) -> tuple[str, ...]:
    """Key of each enclosing domain, highest first; a level without a label has no domain ("")."""
    paths: list[str] = []
    prefix = ""
    for depth, value in enumerate(domains):
        prefix = f"{prefix}/{value}" if depth else value
        paths.append(sys.intern(f"{depth}:{prefix}") if value else "")
    return tuple(paths)


def pod_record(obj: dict[str, Any], gang_key: str | None, yielding_gang: str | None = None,
               jobset: JobSetMember | None = None) -> PodRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    phase = status.get("phase", "")
    return PodRecord(
        uid=meta.get("uid", ""),
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        node_name=spec.get("nodeName") or "",
        requests=pod_requests(spec),
        terminal=phase in ("Succeeded", "Failed"),
        deleting=bool(meta.get("deletionTimestamp")),
        gang_key=gang_key,
        scheduler_name=spec.get("schedulerName") or "",
        gated=bool(spec.get("schedulingGates")),
        ready=_condition(status, "Ready") == "True",
        succeeded=phase == "Succeeded",
        priority=int32(spec.get("priority")),
        preempts=spec.get("preemptionPolicy") != "Never",
        nominated_node=nominated if isinstance(nominated := status.get("nominatedNodeName"), str) else "",
        started=bool(status.get("startTime")),
        unschedulable=_unschedulable(status),
        consumes=_consumed_request(meta.get("annotations")),
        apart=members_apart(spec, meta) if "affinity" in spec or _SPREAD in spec else None,
        rank=pod_rank(meta),
        yielding_gang=yielding_gang,
        jobset=jobset,
        node_selector=_node_selector(spec.get("nodeSelector")),
        kueue_admitted=KUEUE_PODSET_LABEL in (meta.get("labels") or ()),
        part=_scheduling_group(meta, spec),
        claim_refs=pod_claim_refs(spec, status) if spec.get("resourceClaims") else (),
    )


def _scheduling_group(meta: dict[str, Any], spec: dict[str, Any]) -> str:
    """The native PodGroup the pod names ("namespace/name"), or ""."""
    group = spec.get("schedulingGroup")
    name = group.get("podGroupName") if isinstance(group, dict) else None
    return f"{meta.get('namespace', '')}/{name}" if isinstance(name, str) and name else ""


# Kueue labels the pods of every workload it admitted with the workload's pod set.
KUEUE_PODSET_LABEL = "kueue.x-k8s.io/podset"


def _node_selector(selector: Any) -> tuple[tuple[str, str], ...]:
    if not selector or not isinstance(selector, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in selector.items()))


COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# JobSet numbers its Jobs: across the whole JobSet (newer releases), else within a replicated job.
JOBSET_INDEXES = ("jobset.sigs.k8s.io/job-global-index", "jobset.sigs.k8s.io/job-index")


def pod_rank(meta: dict[str, Any]) -> tuple[int, ...]:
    """Where the pod stands in its workload's rank order: (job index, completion index), the job
    index 0 outside a JobSet; ``()`` for a pod that is not an indexed member (no rank, no order)."""
    labels = meta.get("labels")
    annotations = meta.get("annotations")
    index = _index_of(labels, annotations, COMPLETION_INDEX)
    if index < 0:
        return ()
    for key in JOBSET_INDEXES:
        job = _index_of(labels, annotations, key)
        if job >= 0:
            return (job, index)
    return (0, index)


def _index_of(labels: Any, annotations: Any, key: str) -> int:
    """A non-negative decimal index from the label, else the annotation; -1 when neither has one
    (objects come from watches and request bodies alike: a hostile value must not raise)."""
    for source in (labels, annotations):
        if isinstance(source, dict):
            value = source.get(key)
            if isinstance(value, str) and 0 < len(value) <= 9 and value.isascii() and value.isdigit():
                return int(value)
    return -1


CONSUME_ANNOTATIONS = ("autoscaling.x-k8s.io/consume-provisioning-request",
                       "cluster-autoscaler.kubernetes.io/consume-provisioning-request")  # the older key


def _consumed_request(annotations: Any) -> str:
    if not isinstance(annotations, dict):
        return ""
    for key in CONSUME_ANNOTATIONS:
        value = annotations.get(key)
        if isinstance(value, str) and value:
            return value[:253]
    return ""


def _unschedulable(status: dict[str, Any]) -> bool:
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled":
            return condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
    return False


_SPREAD = "topologySpreadConstraints"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
HOSTNAME_LABEL = "kubernetes.io/hostname"


def int32(raw: Any) -> int:
    """A priority as the API defines it (int32); anything else (absent, a string, a float) is 0.

    Objects come from watches and from request bodies alike, so a hostile value must not raise."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        return 0
    return min(max(raw, INT32_MIN), INT32_MAX)


def shrank(old: NodeRecord, new: NodeRecord) -> bool:
    """Whether a node update can leave less room than before (for any resource, or pod slots)."""
    if new.pods_allocatable < old.pods_allocatable:
        return True
    return any(amount > new.allocatable.get(name, 0) for name, amount in old.allocatable.items())


def grew(old: NodeRecord, new: NodeRecord) -> bool:
    """Whether a node update can make room for a pod that did not fit before."""
    if new.pods_allocatable > old.pods_allocatable:
        return True
    return any(amount > old.allocatable.get(name, 0) for name, amount in new.allocatable.items())
