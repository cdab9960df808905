"""Payload builders: Kubernetes objects and kube-scheduler requests as JSON, nothing imported from Quorum.

Objects are derived from the recorded-style JSON documents in ``data/`` (shaped the way
kube-scheduler and the apiserver send them) so every test starts from a realistic payload and only
changes what it is about. Free of ``extender`` imports, so tests of any version of Quorum can use it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"

BLOCK = "topology.quorum.dev/block"
RACK = "topology.quorum.dev/rack"
HOST = "kubernetes.io/hostname"
LEVEL_LABELS = (BLOCK, RACK, HOST)

GANG_POD_UID = "6f1c2a4e-0d3b-4c8e-9a51-7b2e8d9f0a10"
VICTIM_UID = "41d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"


@cache
def _text(name: str) -> str:
    return (DATA_DIR / name).read_text(encoding="utf-8")


def load(name: str) -> Any:
    """A fresh (mutable) copy of a JSON document from ``data/``."""
    return json.loads(_text(name))


def raw(name: str) -> bytes:
    """A document from ``data/`` exactly as stored, as a request body."""
    return _text(name).encode()


def make_node(name: str, block: str, rack: str, *, gpus: int = 8, cpu: str = "64",
              pods: str = "110") -> dict[str, Any]:
    """A kwok Node like ``hack/gen-nodes.sh`` creates, with the three topology labels."""
    node: dict[str, Any] = load("node_kwok.json")
    meta = node["metadata"]
    meta["name"] = name
    meta["labels"].update({HOST: name, BLOCK: block, RACK: rack})
    for key in ("capacity", "allocatable"):
        node["status"][key].update({"cpu": cpu, "nvidia.com/gpu": str(gpus), "pods": pods})
    return node


def topology_nodes(blocks: int = 2, racks: int = 2, per_rack: int = 2) -> list[dict[str, Any]]:
    """Nodes named ``kwok-b<i>-r<j>-n<k>`` in ``blocks`` x ``racks`` x ``per_rack``."""
    return [
        make_node(f"kwok-b{b}-r{r}-n{n}", f"b{b}", f"b{b}-r{r}")
        for b in range(blocks)
        for r in range(racks)
        for n in range(per_rack)
    ]


def make_pod(
    name: str,
    uid: str,
    *,
    namespace: str = "ml",
    group: str | None = None,
    gang_annotation: str | None = None,
    min_count: int | str | None = None,
    node: str | None = None,
    phase: str = "Pending",
    cpu: str = "8",
    memory: str = "64Gi",
    gpus: int = 2,
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Job-owned training pod; by default outside any gang (no schedulingGroup, no annotations)."""
    pod: dict[str, Any] = load("pod_gang_member.json")
    meta = pod["metadata"]
    spec = pod["spec"]
    meta.update(name=name, uid=uid, namespace=namespace, annotations=dict(annotations or {}))
    spec.pop("schedulingGroup")
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    if gang_annotation is not None:
        meta["annotations"]["quorum.dev/gang"] = gang_annotation
    if min_count is not None:
        meta["annotations"]["quorum.dev/min-count"] = str(min_count)
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec["containers"][0]["resources"] = {"limits": dict(requests), "requests": dict(requests)}
    if node is not None:
        spec["nodeName"] = node
        pod["status"] = {"phase": phase, "hostIP": "10.0.0.10", "qosClass": "Guaranteed"}
    else:
        pod["status"]["phase"] = phase
    if deleting:
        meta["deletionTimestamp"] = "2025-03-14T10:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    return pod


def bound(pod: dict[str, Any], node: str, phase: str = "Running") -> dict[str, Any]:
    """The same pod after kube-scheduler bound it (a MODIFIED event from the watch)."""
    out = copy.deepcopy(pod)
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": phase, "hostIP": "10.0.0.10", "qosClass": "Guaranteed"}
    return out


def merge_annotations(current: dict[str, str], patch: dict[str, str | None]) -> dict[str, str]:
    """``current`` after a JSON merge patch of annotations (None removes a key), as the apiserver
    applies it; changed in place and returned."""
    for key, value in patch.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return current


def make_podgroup(name: str, min_count: int | None, *, namespace: str = "ml",
                  topology_key: str | None = None, priority: int | None = None,
                  parent: str | None = None) -> dict[str, Any]:
    """A scheduling.k8s.io/v1beta1 PodGroup; ``min_count=None`` gives the basic policy. Its required
    topology is ``topology_key`` (any policy may carry one); ``priority=None`` keeps the recorded one;
    ``parent`` names its CompositePodGroup."""
    if min_count is None:
        group: dict[str, Any] = load("podgroup_basic.json")
    else:
        group = load("podgroup_gang.json")
        group["spec"]["schedulingPolicy"]["gang"]["minCount"] = min_count
    group["spec"].pop("schedulingConstraints", None)
    if topology_key is not None:
        group["spec"]["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if priority is not None:
        group["spec"]["priority"] = priority
    if parent is not None:
        group["spec"]["parentCompositePodGroupName"] = parent
    group["metadata"].update(name=name, namespace=namespace)
    return group


def make_composite(name: str, min_groups: int | None, *, namespace: str = "ml",
                   topology_key: str | None = None, parent: str | None = None) -> dict[str, Any]:
    """A scheduling.k8s.io/v1alpha3 CompositePodGroup as 1.37 serves it; ``min_groups=None`` gives
    the basic policy."""
    policy: dict[str, Any] = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    spec: dict[str, Any] = {"schedulingPolicy": policy, "disruptionMode": {"all": {}}}
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-cpg-{name}",
                         "creationTimestamp": "2026-11-27T08:00:00Z"},
            "spec": spec}


def extender_args(pod: dict[str, Any], *, names: list[str] | None = None,
                  nodes: list[dict[str, Any]] | None = None) -> bytes:
    """ExtenderArgs as kube-scheduler encodes it: capitalised keys, the unused field ``null``."""
    doc = {
        "Pod": pod,
        "Nodes": None if nodes is None else {"metadata": {}, "items": nodes},
        "NodeNames": names,
    }
    return json.dumps(doc).encode()


def binding_args(name: str, namespace: str, uid: str, node: str) -> bytes:
    return json.dumps({"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}).encode()


def node_names(nodes: Iterable[dict[str, Any]]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


def gang_pod(name: str, gang: str | None = None, min_count: int | None = None, *, gpus: int = 1,
             cpu: str = "4", required: str | None = None, preferred: str | None = None,
             node_name: str = "", podgroup: str | None = None, namespace: str = "ml") -> dict[str, Any]:
    """A pod with uid ``uid-<name>``; a gang member by annotations (``gang``) or by ``podgroup``."""
    annotations: dict[str, str] = {}
    if gang and required:
        annotations["quorum.dev/required-topology"] = required
    if gang and preferred:
        annotations["quorum.dev/preferred-topology"] = preferred
    return make_pod(name, f"uid-{name}", namespace=namespace, group=podgroup, gang_annotation=gang,
                    min_count=min_count if gang else None, node=node_name or None,
                    phase="Running" if node_name else "Pending", cpu=cpu, memory="1Gi", gpus=gpus,
                    annotations=annotations)
