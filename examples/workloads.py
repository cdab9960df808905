"""Example workloads for the demo, as plain Kubernetes objects.

Each function returns the objects of one workload; ``hack/demo.py`` creates them in order.
Write them to YAML with ``python examples/workloads.py > workloads.yaml`` to apply them by hand.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

SCHEDULER = "quorum"


def _extended(requests: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in requests.items() if "/" in name}


def _pod(
    name: str, requests: dict[str, str], annotations: dict[str, str] | None = None, group: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/trainer:latest",
                # Extended resources such as GPUs need a limit equal to the request.
                "resources": {"requests": requests, "limits": _extended(requests)},
            }
        ],
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "annotations": annotations or {},
            "labels": {"demo": name.rsplit("-", 1)[0]},
        },
        "spec": spec,
    }


def annotated_gang(
    name: str,
    size: int,
    requests: dict[str, str],
    *,
    required: str | None = None,
    preferred: str | None = None,
) -> list[dict[str, Any]]:
    """A gang declared with annotations only (works on any cluster, no PodGroup API needed)."""
    annotations = {"quorum.dev/gang": name, "quorum.dev/min-count": str(size)}
    if required:
        annotations["quorum.dev/required-topology"] = required
    if preferred:
        annotations["quorum.dev/preferred-topology"] = preferred
    return [_pod(f"{name}-{i}", requests, annotations) for i in range(size)]


def podgroup_job(name: str, size: int, requests: dict[str, str]) -> list[dict[str, Any]]:
    """A batch Job whose pods belong to a native scheduling.k8s.io/v1beta1 PodGroup."""
    group = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
    }
    template = _pod(name, requests, group=name)
    template["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": size,
            "completions": size,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"demo": name}}, "spec": template["spec"]},
        },
    }
    return [group, job]


def plain_pods(name: str, count: int, requests: dict[str, str]) -> list[dict[str, Any]]:
    return [_pod(f"{name}-{i}", requests) for i in range(count)]


GPU4 = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}
GPU1 = {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"}
GPU8 = {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}

WORKLOADS: dict[str, list[dict[str, Any]]] = {
    # 8 × 4 GPUs = exactly one rack (4 nodes × 8 GPUs), and it must be one rack.
    "allreduce (gang of 8, required rack)": annotated_gang("allreduce", 8, GPU4, required="rack"),
    # 40 × 1 GPU is more than a rack holds: fewest racks, inside one block.
    "pretrain (gang of 40, preferred rack)": annotated_gang("pretrain", 40, GPU1, preferred="rack"),
    # A Job whose pods join a PodGroup; the Job controller creates the pods.
    "finetune (Job + PodGroup, 4 pods)": podgroup_job(
        "finetune", 4, {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    ),
    # Plain pods: scheduled normally, never on capacity reserved for a gang.
    "notebooks (3 plain pods)": plain_pods("notebook", 3, {"cpu": "1", "memory": "2Gi"}),
    # 24 whole nodes: more than is free until another gang finishes.
    "sweep (gang of 24 × 8 GPUs)": annotated_gang("sweep", 24, GPU8),
}


if __name__ == "__main__":
    yaml.safe_dump_all([o for objs in WORKLOADS.values() for o in objs], sys.stdout, sort_keys=False)
