"""Test support for gang life-cycle scenarios: Job-managed gangs, misbehaving kwok pods, node faults.

* ``job_manifest`` builds a batch/v1 Job whose pods are one gang (annotations or a PodGroup). The
  Job recreates pods Quorum evicts or that fail, which is how a gang is requeued.
* ``kwok_annotations`` makes kwok pods misbehave through the Stages in hack/kwok/stages.yaml:
  never Ready, or Failed after a delay.
* ``evict`` evicts a pod through the Eviction API, as Quorum does.
* ``NodeFaults`` deletes nodes or makes them NotReady and puts them back as they were; the
  ``node_faults`` fixture (conftest.py) restores them after the test, because the session's
  ``topology`` fixture assumes the full node set.

The facts these helpers were measured against (delays of the Job controller, pod GC, ...) are in
tests/e2e/README.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .cluster import PODGROUP_API, Kube, Settings, pod_manifest, wait
from .scenario import Scenario, node_of

# Pod annotations read by the Stages in hack/kwok/stages.yaml.
ANN_NEVER_READY = "kwok.quorum.dev/never-ready"  # "true": Running, but Ready stays False
ANN_FAIL_AFTER = "kwok.quorum.dev/fail-after"  # Go duration: Running -> Failed (exit code 1)
ANN_COMPLETE_AFTER = "kwok.quorum.dev/complete-after"  # Go duration: Running -> Succeeded
# Node annotation: "true" turns the node's Ready condition False until it is removed.
ANN_NODE_NOT_READY = "kwok.quorum.dev/not-ready"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# Taints the node lifecycle controller manages; a restored node starts without them.
_CONTROLLER_TAINT_PREFIX = "node.kubernetes.io/"


def kwok_annotations(*, never_ready: bool = False, fail_after: str | None = None,
                     complete_after: str | None = None) -> dict[str, str]:
    """Pod annotations for the kwok Stages; durations are Go durations ("30s", "1m30s")."""
    out: dict[str, str] = {}
    if never_ready:
        out[ANN_NEVER_READY] = "true"
    if fail_after is not None:
        out[ANN_FAIL_AFTER] = fail_after
    if complete_after is not None:
        out[ANN_COMPLETE_AFTER] = complete_after
    return out


# ------------------------------------------------------------------------------------------- Jobs
def job_manifest(
    settings: Settings,
    name: str,
    size: int,
    *,
    annotations: Mapping[str, str] | None = None,
    backoff_limit: int = 100,
    backoff_limit_per_index: int | None = None,
    ignore_disruptions: bool = True,
    ignore_exit_codes: Iterable[int] = (),
    **pod_options: Any,
) -> dict[str, Any]:
    """A Job of ``size`` pods (parallelism = completions) forming one gang.

    The pod template is ``pod_manifest(settings, name, **pod_options)``: ``gpus``, ``cpu``,
    ``gang`` (an annotation gang; ``min_count`` defaults to ``size``), ``required``, ``preferred``,
    ``pod_group`` (members of that PodGroup; create it with ``Kube.create_podgroup``), ...
    ``annotations`` are added to every pod (e.g. ``kwok_annotations(...)``). With
    ``ignore_disruptions`` a pod that fails with the DisruptionTarget condition (evicted through the
    Eviction API, removed by the pod GC for a deleted node, preempted) is not counted against
    ``backoff_limit``; failures with one of ``ignore_exit_codes`` (kwok's fail-after stage exits
    with 1) are not counted either.

    The Job controller delays replacements after *any* failed pod, ignored or not: 10 s doubling per
    failure since the last success, up to 10 min, for the whole Job. ``backoff_limit_per_index``
    makes an Indexed Job whose delay (and limit) is per index instead, so evicting a whole gang once
    delays every replacement by 10 s only (see tests/e2e/README.md).
    """
    if pod_options.get("gang") and pod_options.get("min_count") is None:
        pod_options["min_count"] = size
    pod = pod_manifest(settings, name, **pod_options)
    metadata = pod["metadata"]
    metadata["annotations"].update(annotations or {})
    template = {"metadata": {"labels": metadata["labels"], "annotations": metadata["annotations"]},
                "spec": pod["spec"]}
    spec: dict[str, Any] = {"parallelism": size, "completions": size, "template": template}
    if backoff_limit_per_index is None:
        spec["backoffLimit"] = backoff_limit
    else:
        spec.update(completionMode="Indexed", backoffLimitPerIndex=backoff_limit_per_index)
    rules: list[dict[str, Any]] = []
    if ignore_disruptions:
        rules.append({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]})
    codes = sorted(set(ignore_exit_codes))
    if codes:
        rules.append({"action": "Ignore", "onExitCodes": {"operator": "In", "values": codes}})
    if rules:
        spec["podFailurePolicy"] = {"rules": rules}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "labels": dict(metadata["labels"])}, "spec": spec}


def job_pods(kube: Kube, namespace: str, job: str, *, live: bool = True) -> list[dict[str, Any]]:
    """The Job's pods; with ``live`` only those not terminal (Succeeded/Failed) and not deleting."""
    pods = kube.pods(namespace, label_selector=f"{JOB_NAME_LABEL}={job}")
    if live:
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    return pods


def fail_pod(kube: Kube, namespace: str, name: str, after: str = "0s") -> None:
    """Make one running kwok pod fail (exit code 1) ``after`` a Go duration from now, by giving it
    the fail-after annotation (kwok re-evaluates its Stages when the pod changes)."""
    patch = {"metadata": {"annotations": {ANN_FAIL_AFTER: after}}}
    kube.core.patch_namespaced_pod(name, namespace, patch, _request_timeout=30)


def evict(kube: Kube, namespace: str, name: str) -> None:
    """Evict a pod through the Eviction API (policy/v1): DisruptionTarget condition, then deletion."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace}}
    kube.core.create_namespaced_pod_eviction(name, namespace, body,  # type: ignore[arg-type]
                                             _request_timeout=30)


# ------------------------------------------------------------------------------------------ nodes
def node_ready(node: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def node_manifest(node: Mapping[str, Any]) -> dict[str, Any]:
    """What recreates ``node`` as hack/gen-nodes.sh made it: name, labels, annotations, taints that
    are not the node lifecycle controller's, capacity and allocatable (kwok then makes it Ready)."""
    meta, spec, status = node["metadata"], node.get("spec") or {}, node.get("status") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != ANN_NODE_NOT_READY}
    new_spec: dict[str, Any] = {}
    taints = [t for t in spec.get("taints") or [] if not t["key"].startswith(_CONTROLLER_TAINT_PREFIX)]
    if taints:
        new_spec["taints"] = [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]
    if spec.get("unschedulable"):
        new_spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": meta["name"], "labels": dict(meta.get("labels") or {}),
                         "annotations": annotations},
            "spec": new_spec,
            "status": {"capacity": dict(status.get("capacity") or {}),
                       "allocatable": dict(status.get("allocatable") or {})}}


def wait_nodes(kube: Kube, names: Iterable[str], *, ready: bool | None, timeout: float) -> list[str]:
    """Wait until every named node exists and is Ready (``ready=True``), exists and is not Ready
    (``False``), or is gone (``None``). Returns the nodes still not there ([] on success)."""
    wanted = set(names)
    state: dict[str, list[str]] = {"missing": sorted(wanted)}

    def done() -> bool:
        nodes = {n["metadata"]["name"]: n for n in kube.nodes() if n["metadata"]["name"] in wanted}
        if ready is None:
            state["missing"] = sorted(nodes)
        else:
            state["missing"] = sorted(n for n in wanted if n not in nodes or node_ready(nodes[n]) != ready)
        return not state["missing"]

    wait(done, timeout=timeout, interval=0.5)
    return state["missing"]


def delete_nodes(kube: Kube, names: Iterable[str], timeout: float = 30) -> list[dict[str, Any]]:
    """Delete the named nodes (their pods stay bound until the pod GC removes them) and wait until
    they are gone. Returns their manifests for ``restore_nodes``."""
    names = list(names)
    saved = [node_manifest(n) for n in kube.nodes() if n["metadata"]["name"] in set(names)]
    if len(saved) != len(set(names)):
        raise RuntimeError(f"cannot delete nodes that do not exist: "
                           f"{sorted(set(names) - {m['metadata']['name'] for m in saved})}")
    for name in names:
        _call_unless(404, kube.core.delete_node, name)
    left = wait_nodes(kube, names, ready=None, timeout=timeout)
    if left:
        raise RuntimeError(f"nodes still present {timeout:g}s after deletion: {left}")
    return saved


def restore_nodes(kube: Kube, manifests: Iterable[Mapping[str, Any]], timeout: float = 60) -> None:
    """Recreate deleted nodes (an existing one is left as it is) and wait until all are Ready."""
    names = []
    for manifest in manifests:
        names.append(manifest["metadata"]["name"])
        _call_unless(409, kube.core.create_node, dict(manifest))
    left = wait_nodes(kube, names, ready=True, timeout=timeout)
    if left:
        raise RuntimeError(f"restored nodes not Ready within {timeout:g}s: {left}")


def _call_unless(status: int, call: Callable[..., Any], *args: Any) -> None:
    """An API call whose failure with HTTP ``status`` (404 on delete, 409 on create) is no error."""
    try:
        call(*args, _request_timeout=30)
    except ApiException as exc:
        if exc.status != status:
            raise


def set_node_not_ready(kube: Kube, name: str, not_ready: bool = True, timeout: float = 30) -> None:
    """Turn a kwok node's Ready condition False (kwok keeps renewing its Lease and running its pods)
    or back to True, and wait until it is. The node lifecycle controller then taints a NotReady node
    ``node.kubernetes.io/not-ready`` (NoSchedule and NoExecute) and evicts pods that do not tolerate
    it after their tolerationSeconds (300 s by default)."""
    value = "true" if not_ready else None
    kube.core.patch_node(name, {"metadata": {"annotations": {ANN_NODE_NOT_READY: value}}},
                         _request_timeout=30)
    if wait_nodes(kube, [name], ready=not not_ready, timeout=timeout):
        raise RuntimeError(f"node {name} not {'NotReady' if not_ready else 'Ready'} within {timeout:g}s")


class NodeFaults:
    """Node faults a test injects, undone by ``restore`` (the ``node_faults`` fixture calls it)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.deleted: dict[str, dict[str, Any]] = {}
        self.not_ready: set[str] = set()

    def delete(self, names: Iterable[str], timeout: float = 30) -> None:
        names = [n for n in names if n not in self.deleted]
        for manifest in delete_nodes(self.kube, names, timeout=timeout):
            self.deleted[manifest["metadata"]["name"]] = manifest

    def make_not_ready(self, names: Iterable[str], timeout: float = 30) -> None:
        for name in names:
            self.not_ready.add(name)
            set_node_not_ready(self.kube, name, True, timeout=timeout)

    def restore(self, timeout: float = 60) -> None:
        """Recreate deleted nodes and make NotReady ones Ready again; wait until all are Ready."""
        for name in sorted(self.not_ready - set(self.deleted)):
            set_node_not_ready(self.kube, name, False, timeout=timeout)
        self.not_ready.clear()
        restore_nodes(self.kube, self.deleted.values(), timeout=timeout)
        self.deleted.clear()


# ------------------------------------------------------------------------------ Events
def quorum_events(sc: Scenario, kind: str, name: str) -> list[dict[str, Any]]:
    """Events Quorum reported about one object, oldest first (read through core/v1, which shows
    events.k8s.io/v1 Events with ``involvedObject`` and ``reportingComponent``)."""
    out = [e for e in sc.kube.events(sc.ns)
           if (e.get("regarding") or e.get("involvedObject") or {}).get("name") == name
           and (e.get("regarding") or e.get("involvedObject") or {}).get("kind") == kind
           and (e.get("reportingController") or e.get("reportingComponent")) == "quorum.dev/extender"]
    out.sort(key=lambda e: e.get("eventTime") or e.get("lastTimestamp") or "")
    return out


# ------------------------------------------------------------------------------ priorities
# PriorityClasses the queue and preemption scenarios use (admission turns them into spec.priority).
# HIGH_NEVER: priority 1000 with preemptionPolicy Never (admission refuses a pod that sets a policy
# other than its class's, so the policy must come from the class).
LOW, MID, HIGH, HIGH_NEVER = "quorum-e2e-low", "quorum-e2e-mid", "quorum-e2e-high", "quorum-e2e-high-never"
PRIORITY_CLASSES = {LOW: 100, MID: 500, HIGH: 1000, HIGH_NEVER: 1000}


def ensure_priority_classes(kube: Kube) -> dict[str, int]:
    api = client.SchedulingV1Api(kube.api)
    for name, value in PRIORITY_CLASSES.items():
        body = client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value,
                                      preemption_policy="Never" if name == HIGH_NEVER else None,
                                      description="e2e: gang priorities")
        try:
            api.create_priority_class(body, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 409:
                raise
    return PRIORITY_CLASSES


def with_priority(manifests: list[dict[str, Any]], priority_class: str) -> list[dict[str, Any]]:
    for manifest in manifests:
        manifest["spec"]["priorityClassName"] = priority_class
    return manifests


# ------------------------------------------------------------------------------ Job-run gangs
def create_podgroup(kube: Kube, namespace: str, name: str, min_count: int, *, rack_label: str | None,
                    annotations: Mapping[str, str], disruption: str | None = None,
                    priority_class: str | None = None) -> None:
    """``disruption``: "single" or "all" (the apiserver fills in single when absent).
    ``priority_class``: the PodGroup's own; it must be the members' too: with ``GenericWorkload``
    on, kube-scheduler refuses a group whose pods' priority differs from the group's. Admission
    copies its value and its preemptionPolicy, which must then also be written out (when not
    PreemptLowerPriority, the apiserver's default)."""
    group, version, plural = PODGROUP_API
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if rack_label:
        spec["schedulingConstraints"] = {"topology": [{"key": rack_label}]}
    if disruption:
        spec["disruptionMode"] = {disruption: {}}
    if priority_class:
        spec["priorityClassName"] = priority_class
        if priority_class == HIGH_NEVER:
            spec["preemptionPolicy"] = "Never"
    body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
            "spec": spec}
    kube.custom.create_namespaced_custom_object(group, version, namespace, plural, body, _request_timeout=30)


def start_gang(sc: Scenario, name: str, size: int, gpus: int, *, rack: bool = False,
               group_annotations: Mapping[str, str] | None = None,
               pod_annotations: Mapping[str, str] | None = None,
               failure_policy: bool = True, priority_class: str | None = None,
               disruption: str | None = None, group_priority_class: str | None = None) -> None:
    """A PodGroup gang of ``size`` members, run by an Indexed Job of the same name.

    With ``failure_policy`` the Job ignores evictions (DisruptionTarget) in its failure count, but
    then replaces a pod only once it is Failed; without it, as soon as it is being deleted.
    ``priority_class`` names the pods' PriorityClass (admission turns it into their priority);
    ``disruption`` and ``group_priority_class`` go to the PodGroup (``create_podgroup``).
    """
    create_podgroup(sc.kube, sc.ns, name, size, rack_label=sc.settings.rack_label if rack else None,
                    annotations=group_annotations or {}, disruption=disruption,
                    priority_class=group_priority_class or priority_class)
    job = job_manifest(sc.settings, name, size, gpus=gpus, pod_group=name, annotations=pod_annotations,
                       backoff_limit_per_index=50, ignore_disruptions=failure_policy)
    if priority_class:
        job["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    sc.kube.create_job(sc.ns, job)


def live_bound(sc: Scenario, job: str, size: int) -> dict[str, str] | None:
    """name -> node of the Job's live pods, once all ``size`` of them are bound."""
    pods = job_pods(sc.kube, sc.ns, job)
    placement = {p["metadata"]["name"]: node_of(p) for p in pods}
    return placement if len(placement) == size and all(placement.values()) else None
