"""Synthetic cluster for bench/microbench.py: kwok-like nodes, realistic pods, pending gangs, the
cache and coordinator built from them, the measured series and cases, and the request bodies."""

from __future__ import annotations

import time
from typing import Any

import orjson

from extender.cluster.cache import ClusterCache
from extender.config import Config, GangTimings
from extender.gang.coordinator import Coordinator
from extender.gang.effects import NoActions
from extender.metrics import Metrics

NODES_PER_RACK = 16
RACKS_PER_BLOCK = 16
GANGS = 4  # gangs that get a reservation in case (b)
GANG_SIZE = 16  # members per gang, 8 GPUs each: one whole odd rack per gang
WAITING_GANG_PODS = 4  # the case (d) gang has this many of its GANG_SIZE members
NOFIT_GANG_SIZE = GANG_SIZE + 1  # the case (e) gang: one member more than a rack has nodes
GPU = "nvidia.com/gpu"



# ----------------------------------------------------------------------------------------- fixtures


def _uid(kind: int, i: int) -> str:
    return f"{kind:08x}-0000-4000-8000-{i:012x}"


def node_name(i: int) -> str:
    rack_global, n = divmod(i, NODES_PER_RACK)
    b, r = divmod(rack_global, RACKS_PER_BLOCK)
    return f"kwok-b{b}-r{r}-n{n}"


def node_position(i: int) -> tuple[int, int]:
    rack_global = i // NODES_PER_RACK
    return divmod(rack_global, RACKS_PER_BLOCK)


def make_node(i: int) -> dict[str, Any]:
    name = node_name(i)
    b, r = node_position(i)
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(1, i),
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "topology.quorum.dev/block": f"b{b}",
                "topology.quorum.dev/rack": f"b{b}-r{r}",
            },
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256 % 256}.{i % 256}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake", "operatingSystem": "linux"},
        },
    }


def make_pod(
    i: int,
    *,
    namespace: str,
    name: str,
    node: str = "",
    requests: dict[str, str],
    owner_kind: str = "ReplicaSet",
    owner_name: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "default-scheduler",
) -> dict[str, Any]:
    """A pod shaped like one from the apiserver: containers with resources, owner, status."""
    limits = {k: v for k, v in requests.items() if k != "cpu"}
    bound = bool(node)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(2, i),
            "resourceVersion": str(50_000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {"app.kubernetes.io/name": owner_name or name, "pod-template-hash": f"{i % 97:05x}",
                       **(labels or {})},
            "annotations": {"kubectl.kubernetes.io/default-container": "main", **(annotations or {})},
            "ownerReferences": [
                {"apiVersion": "apps/v1" if owner_kind == "ReplicaSet" else "batch/v1", "kind": owner_kind,
                 "name": owner_name or name, "uid": _uid(3, i // 8), "controller": True,
                 "blockOwnerDeletion": True},
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/team/app:1.2.3",
                    "command": ["/bin/app"],
                    "args": ["--port=8080", f"--shard={i % 64}"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "LOG_LEVEL", "value": "info"}],
                    "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                    "resources": {"requests": dict(requests), "limits": limits},
                    "volumeMounts": [{"name": "kube-api-access", "mountPath":
                                      "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "sidecar",
                    "image": "registry.example/infra/proxy:0.9",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"memory": "128Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "restartPolicy": "Always" if owner_kind == "ReplicaSet" else "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": scheduler,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }
    if bound:
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "10.0.0.1",
            "podIP": f"10.244.{i // 256 % 256}.{i % 256}",
            "startTime": "2025-01-01T00:00:05Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2025-01-01T00:00:05Z"}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [
                {"name": c, "ready": True, "restartCount": 0, "image": "registry.example/x",
                 "imageID": "registry.example/x@sha256:0", "containerID": f"containerd://{i:064x}",
                 "started": True, "state": {"running": {"startedAt": "2025-01-01T00:00:06Z"}}}
                for c in ("main", "sidecar")
            ],
        }
    else:
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return pod


def bound_pod(i: int, node_index: int, slot: int) -> dict[str, Any]:
    """Slot 0 on nodes of even racks holds 4 GPUs; the rest are cpu/memory services."""
    _, r = node_position(node_index)
    requests = {"cpu": "2", "memory": "8Gi"}
    if slot == 0 and r % 2 == 0:
        requests = {"cpu": "8", "memory": "64Gi", GPU: "4"}
    owner = f"svc-{i // 8 % 500}"
    return make_pod(i, namespace=f"team-{i % 20}", name=f"{owner}-{i:06x}", node=node_name(node_index),
                    requests=requests, owner_name=owner)


def gang_pod(i: int, gang: str, member: int, min_count: int = GANG_SIZE) -> dict[str, Any]:
    return make_pod(
        i, namespace="ml", name=f"{gang}-worker-{member}", requests={"cpu": "8", "memory": "64Gi", GPU: "8"},
        owner_kind="Job", owner_name=gang, labels={"job-name": gang},
        annotations={"quorum.dev/gang": gang, "quorum.dev/min-count": str(min_count),
                     "quorum.dev/required-topology": "rack"},
        scheduler="quorum",
    )


def plain_pod() -> dict[str, Any]:
    return make_pod(9_000_000, namespace="team-1", name="web-7d9f-abcde",
                    requests={"cpu": "4", "memory": "16Gi", GPU: "1"}, owner_name="web-7d9f",
                    scheduler="quorum")


NoopActions = NoActions  # every side effect a no-op: the benchmark times the request path only


class Cluster:
    """Cache + coordinator + the pods the cases send."""

    def __init__(self, nodes: int, pods_per_node: int) -> None:
        # A long bind timeout keeps the benchmark's reservations alive for the whole run.
        self.config = Config(gang=GangTimings(bind_timeout_seconds=86_400.0))
        self.cache = ClusterCache(tuple(level.node_label for level in self.config.levels))
        self.metrics = Metrics()
        self.coordinator = Coordinator(self.config, self.cache, NoopActions(), self.metrics)
        started = time.perf_counter()
        for i in range(nodes):
            self.cache.upsert_node(make_node(i))
        pod_index = 0
        for n in range(nodes):
            for slot in range(pods_per_node):
                self.cache.upsert_pod(bound_pod(pod_index, n, slot))
                pod_index += 1
        self.gang_pods = [[gang_pod(8_000_000 + g * 100 + m, f"train-{g}", m) for m in range(GANG_SIZE)]
                          for g in range(GANGS)]
        self.waiting_pods = [gang_pod(8_100_000 + m, "train-waiting", m) for m in range(WAITING_GANG_PODS)]
        self.nofit_pods = [gang_pod(8_200_000 + m, "train-nofit", m, NOFIT_GANG_SIZE)
                           for m in range(NOFIT_GANG_SIZE)]
        for pod in [p for gang in self.gang_pods for p in gang] + self.waiting_pods + self.nofit_pods:
            self.cache.upsert_pod(pod)
        for kind in self.cache.synced:
            self.cache.synced[kind] = True
        self.build_seconds = time.perf_counter() - started
        self.names = [node_name(i) for i in range(nodes)]
        self.plain = plain_pod()


# Each series: (case, verb, which body). Reservations are made between the (a) and (b) series.
SERIES_BASELINE = [("-", "healthz", "none")]  # GET /healthz: the HTTP round trip with no work
SERIES_BEFORE = [("a", "filter", "plain"), ("a", "prioritize", "plain")]
SERIES_AFTER = [
    ("b", "filter", "plain"),
    ("b", "prioritize", "plain"),
    ("c", "filter", "reserved-member"),
    ("c", "prioritize", "reserved-member"),
    ("d", "filter", "waiting-member"),
    ("e", "filter", "nofit-member"),
]
CASES = {
    "a": "plain pod, no reservations",
    "b": f"plain pod, {GANGS} gangs x {GANG_SIZE} nodes reserved",
    "c": "reserved gang member",
    "d": f"gang member waiting for quorum ({WAITING_GANG_PODS}/{GANG_SIZE})",
    "e": f"member of a gang that fits in no rack ({NOFIT_GANG_SIZE} x 8 GPUs): cached no-fit",
}



def request_bodies(nodes: int) -> dict[str, bytes | None]:
    """Request bodies as kube-scheduler sends them (nodeCacheCapable), built from the same fixtures
    as ``Cluster`` so the pods match the cache; "none" marks the GET baseline."""
    names = [node_name(i) for i in range(nodes)]

    def body(pod: dict[str, Any]) -> bytes:
        return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})

    bodies: dict[str, bytes | None] = {
        "none": None,
        "plain": body(plain_pod()),
        "reserved-member": body(gang_pod(8_000_000 + 1, "train-0", 1)),
        "waiting-member": body(gang_pod(8_100_000, "train-waiting", 0)),
        "nofit-member": body(gang_pod(8_200_000, "train-nofit", 0, NOFIT_GANG_SIZE)),
    }
    for g in range(GANGS):
        bodies[f"gang-{g}-trigger"] = body(gang_pod(8_000_000 + g * 100, f"train-{g}", 0))
    return bodies

