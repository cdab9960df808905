"""What the cluster benchmark schedules: the workloads W1..W6 and the objects of one run.

Both systems get the very same objects (native v1beta1 PodGroups, pods naming them through
``spec.schedulingGroup``); only ``spec.schedulerName`` differs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from extender.cluster.resources import MEMBER_RESOURCE

RUN_LABEL = "bench.quorum.dev/run"
GANG_LABEL = "bench.quorum.dev/gang"
RACK_KEY = "topology.quorum.dev/rack"
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8  # hack/gen-nodes.sh
PODGROUP_PATH = "/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups"


@dataclass(frozen=True)
class Workload:
    """One shape of work: its gangs (sizes), what each pod asks for, and how it is judged."""

    name: str
    title: str
    configs: tuple[str, ...]  # compared side by side, e.g. ("Q", "N"); the last is the baseline
    optional: tuple[str, ...] = ()  # run only when named in --configs (placed before the baseline)
    gang_sizes: tuple[int, ...] = ()  # empty: plain pods
    plain_pods: int = 0
    required_rack: bool = False
    requests: dict[str, str] = field(default_factory=lambda: {"cpu": "100m", "memory": "128Mi"})
    paused: bool = True  # created while the scheduler is paused; False: W4 times last created -> all bound
    complete_after: str = ""  # kwok completes each pod this long after it starts (W5, W6)
    interleave: bool = False  # plain pods created between the gangs, not after them (W6)
    timeout: float = 240.0

    def chosen(self, wanted: list[str]) -> tuple[str, ...]:
        """The configurations to run, the baseline last: all of ``configs`` and the optional ones
        named in ``wanted``, or, when ``wanted`` names some, only those."""
        every = (*self.configs[:-1], *(c for c in self.optional if c in wanted), self.configs[-1])
        return tuple(c for c in every if not wanted or c in wanted)

    @property
    def pods(self) -> int:
        return sum(self.gang_sizes) + self.plain_pods


def mixed_sizes(total_slots: int, seed: int = 7) -> tuple[int, ...]:
    """Gang sizes 2..16, in a fixed pseudo-random order, adding up to ``total_slots``."""
    rng, sizes, left = random.Random(seed), [], total_slots
    while left > 0:
        size = min(rng.choice((2, 4, 4, 8, 8, 16)), left)
        sizes.append(size)
        left -= size
    return tuple(sizes)


def workloads(nodes: int, pods: int) -> dict[str, Workload]:
    """The six workloads for a cluster of ``nodes`` (8 GPUs each) and ``pods`` pods in W1-W3."""
    gangs = pods // 16
    gpu_pod = {"cpu": "1", "memory": "1Gi", GPU: str(GPUS_PER_NODE)}  # a whole node
    half_node = {"cpu": "1", "memory": "1Gi", GPU: str(GPUS_PER_NODE // 2)}
    mixed_gangs = (3 * nodes // 2) // 16  # half of 1.5x the cluster's half-node slots in gangs
    return {w.name: w for w in (
        Workload("W1", f"{gangs} gangs of 16", ("Q", "N"), gang_sizes=(16,) * gangs, optional=("Qz",)),
        Workload("W2", f"{gangs} gangs of 16, required rack", ("Q", "N"), gang_sizes=(16,) * gangs,
                 required_rack=True),
        Workload("W3", f"{pods} plain pods", ("Vq", "Vz", "Vm", "V"), plain_pods=pods),
        Workload("W4", "one gang of 256", ("Q", "N"), gang_sizes=(256,), paused=False, timeout=120,
                 optional=("Qz",)),
        Workload("W5", "mixed gangs, whole-node pods, 2x oversubscribed", ("Q", "N"),
                 gang_sizes=mixed_sizes(2 * nodes), requests=gpu_pod, complete_after="20s", timeout=150),
        Workload("W6", "gangs of 16 and as many plain pods, half-node pods, 1.5x", ("Mq", "Mm"),
                 gang_sizes=(16,) * mixed_gangs, plain_pods=16 * mixed_gangs, requests=half_node,
                 complete_after="20s", interleave=True, timeout=300),
    )}


SCHEDULER_OF = {"Q": "quorum", "Vq": "quorum", "Vm": "quorum-members", "N": "native", "V": "native",
                "Vz": "null-extender", "Qz": "null-extender", "Mq": "quorum", "Mm": "quorum-members"}
MEMBERS_ONLY = ("Vm", "Mm")  # gang members request MEMBER_RESOURCE, so that kube-scheduler asks Quorum


def podgroup(namespace: str, name: str, size: int, required_rack: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": size}}}
    if required_rack:
        spec["schedulingConstraints"] = {"topology": [{"key": RACK_KEY}]}
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod(namespace: str, name: str, config: str, work: Workload, run: str, gang: str | None) -> dict[str, Any]:
    labels = {RUN_LABEL: run, GANG_LABEL: gang or ""}
    annotations = {"kwok.quorum.dev/complete-after": work.complete_after} if work.complete_after else {}
    requests = dict(work.requests)
    if gang and config in MEMBERS_ONLY:
        requests[MEMBER_RESOURCE] = "1"
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_OF[config],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": requests, "limits": dict(requests)}}],
    }
    if gang:
        spec["schedulingGroup"] = {"podGroupName": gang}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": spec}


def run_objects(namespace: str, config: str, work: Workload, run: str
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(PodGroups, pods) of one run, gang after gang, then the plain pods (or, interleaved, an equal
    share of the plain pods after each gang)."""
    sizes = enumerate(work.gang_sizes)
    groups = [podgroup(namespace, f"g{i}", size, work.required_rack) for i, size in sizes]
    plain = [pod(namespace, f"p{i}", config, work, run, None) for i in range(work.plain_pods)]
    share = len(plain) // len(groups) if work.interleave and groups else 0
    pods: list[dict[str, Any]] = []
    for i, size in enumerate(work.gang_sizes):
        pods += [pod(namespace, f"g{i}-{m}", config, work, run, f"g{i}") for m in range(size)]
        pods += plain[i * share:(i + 1) * share]
    pods += plain[len(groups) * share:]
    return groups, pods
