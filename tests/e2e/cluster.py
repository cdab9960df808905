"""Access to the cluster under test and to Quorum: settings, API clients, topology, manifests.

Everything here is synchronous (the official ``kubernetes`` client) and reads objects as plain
dicts with the API's own camelCase keys (``_preload_content=False``), so what the tests assert on is
exactly what the apiserver returned.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]

ANN_GANG = "quorum.dev/gang"
ADMIT_LABEL = "e2e.quorum.dev/admit"
ADMIT_VALUE = "yes"
ANN_MIN_COUNT = "quorum.dev/min-count"
ANN_REQUIRED = "quorum.dev/required-topology"
ANN_PREFERRED = "quorum.dev/preferred-topology"
E2E_LABEL = "quorum.dev/e2e"
ROLE_LABEL = "e2e.quorum.dev/role"
PODGROUP_API = ("scheduling.k8s.io", "v1beta1", "podgroups")
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")  # served with hack/cluster-up.sh --jobset


@dataclass(frozen=True)
class Settings:
    """Where the cluster and Quorum are, and what the topology looks like; all from the environment."""

    kubeconfig: str
    quorum_url: str
    scheduler_name: str
    block_label: str
    rack_label: str
    gpu_resource: str
    image: str
    quorum_pid_file: Path
    results_dir: Path

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        return cls(
            kubeconfig=env.get("KUBECONFIG") or str(REPO_ROOT / ".cache" / "cluster" / "kubeconfig"),
            quorum_url=(env.get("QUORUM_URL") or "http://127.0.0.1:8888").rstrip("/"),
            scheduler_name=env.get("QUORUM_SCHEDULER_NAME", "quorum"),
            block_label=env.get("QUORUM_BLOCK_LABEL", "topology.quorum.dev/block"),
            rack_label=env.get("QUORUM_RACK_LABEL", "topology.quorum.dev/rack"),
            gpu_resource=env.get("QUORUM_E2E_GPU_RESOURCE", "nvidia.com/gpu"),
            image=env.get("QUORUM_E2E_IMAGE", "registry.k8s.io/pause:3.10"),
            quorum_pid_file=Path(env.get("QUORUM_PID_FILE")
                                 or REPO_ROOT / ".cache" / "cluster" / "pids" / "quorum.pid"),
            results_dir=Path(env.get("QUORUM_E2E_RESULTS") or REPO_ROOT / ".cache" / "e2e"),
        )


# --------------------------------------------------------------------------------------- kube API
class Kube:
    """The official client's APIs plus helpers that return raw JSON dicts."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig,  # type: ignore[no-untyped-call]
                                client_configuration=configuration)
        configuration.connection_pool_maxsize = 32
        self.configuration = configuration
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)

    def fork(self) -> Kube:
        """A client with its own connection pool (for a background thread)."""
        return Kube(self.kubeconfig)

    @staticmethod
    def raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        response = call(*args, _preload_content=False, _request_timeout=30, **kwargs)
        return json.loads(response.data)

    # -- reads
    def pods(self, namespace: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self.raw(self.core.list_namespaced_pod, namespace, **kwargs)["items"]  # type: ignore[no-any-return]

    def all_pods(self) -> list[dict[str, Any]]:
        return self.raw(self.core.list_pod_for_all_namespaces)["items"]  # type: ignore[no-any-return]

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.raw(self.core.read_namespaced_pod, name, namespace)  # type: ignore[no-any-return]
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def version(self) -> dict[str, Any]:
        """The apiserver's /version (major, minor, gitVersion)."""
        return self.raw(client.VersionApi(self.api).get_code)  # type: ignore[no-any-return]

    def nodes(self) -> list[dict[str, Any]]:
        return self.raw(self.core.list_node)["items"]  # type: ignore[no-any-return]

    def events(self, namespace: str) -> list[dict[str, Any]]:
        return self.raw(self.core.list_namespaced_event, namespace)["items"]  # type: ignore[no-any-return]

    def podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        group, version, plural = PODGROUP_API
        try:
            obj = self.custom.get_namespaced_custom_object(group, version, namespace, plural, name,
                                                           _request_timeout=30)
            return obj if isinstance(obj, dict) else None
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # -- writes (plain dict bodies: the client serialises them as they are)
    def create_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        body = {"metadata": {"name": name, "labels": dict(labels)}}
        self.core.create_namespace(body, _request_timeout=30)  # type: ignore[arg-type]

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        if "workloadRef" in (manifest.get("spec") or {}):
            self.create_pod_unchecked(namespace, manifest)
            return
        self.core.create_namespaced_pod(namespace, dict(manifest), _request_timeout=30)  # type: ignore[arg-type]

    def create_pod_unchecked(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        """Create a pod with fields this client's models do not know (``spec.workloadRef`` of 1.35):
        the body goes to the apiserver as it is, which is the one to judge it."""
        method, url, headers, body, _ = self.api.param_serialize(
            "POST", "/api/v1/namespaces/{namespace}/pods", path_params={"namespace": namespace},
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=dict(manifest), auth_settings=["BearerToken"])
        response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
        if not 200 <= response.status < 300:
            raise RuntimeError(f"creating pod {manifest['metadata']['name']}: HTTP {response.status} "
                               f"{response.read()[:300]!r}")

    def create_job(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        self.batch.create_namespaced_job(namespace, dict(manifest), _request_timeout=30)  # type: ignore[arg-type]

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def create_podgroup(self, namespace: str, name: str, min_count: int | None,
                        topology_key: str | None = None) -> None:
        """A v1beta1 PodGroup with the gang policy, or the basic policy when ``min_count`` is None."""
        policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
        spec: dict[str, Any] = {"schedulingPolicy": policy}
        if topology_key:
            spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
        group, version, plural = PODGROUP_API
        body = {"apiVersion": f"{group}/{version}", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        self.custom.create_namespaced_custom_object(group, version, namespace, plural, body,
                                                    _request_timeout=30)

    def admit_blocked(self) -> None:
        """Label every node so that blocked pods (see ``pod_manifest``) pass kube-scheduler's filters."""
        for name in self._node_names():
            patch = {"metadata": {"labels": {ADMIT_LABEL: ADMIT_VALUE}}}
            self.core.patch_node(name, patch, _request_timeout=30)

    def close_admission(self) -> None:
        """Remove the label ``admit_blocked`` set, so the next scenario starts from a clean cluster."""
        for name in self._node_names(ADMIT_LABEL):
            self.core.patch_node(name, {"metadata": {"labels": {ADMIT_LABEL: None}}}, _request_timeout=30)

    def _node_names(self, selector: str = "") -> list[str]:
        nodes = self.core.list_node(label_selector=selector, _request_timeout=30).items
        return [n.metadata.name for n in nodes if n.metadata is not None and n.metadata.name]


# ------------------------------------------------------------------------------------------ Quorum
class Quorum:
    """Quorum's own HTTP endpoints: /readyz, /debug/gangs, /metrics."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def ready(self) -> bool:
        try:
            return self._get("/readyz", timeout=2.0)[0] == 200
        except OSError:
            return False

    def debug(self) -> dict[str, Any]:
        status, body = self._get("/debug/gangs")
        if status != 200:
            raise RuntimeError(f"GET /debug/gangs: HTTP {status}: {body[:300]!r}")
        return json.loads(body)  # type: ignore[no-any-return]

    def gangs(self, namespace: str | None = None) -> dict[str, dict[str, Any]]:
        """Gangs from /debug/gangs keyed by "namespace/name", optionally only one namespace's."""
        out = {}
        for entry in self.debug().get("gangs", []):
            key = entry.get("gang", "")
            if namespace is None or key.startswith(namespace + "/"):
                out[key] = entry
        return out

    def debug_text(self, namespace: str | None = None) -> str:
        try:
            doc = self.debug()
        except (OSError, RuntimeError, ValueError) as exc:
            return f"(Quorum /debug/gangs unavailable: {exc})"
        if namespace is not None:
            doc = dict(doc, gangs=[g for g in doc.get("gangs", [])
                                   if str(g.get("gang", "")).startswith(namespace + "/")])
        return json.dumps(doc, indent=1, sort_keys=True)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample as {(name, sorted labels): value}."""
        status, body = self._get("/metrics")
        if status != 200:
            raise RuntimeError(f"GET /metrics: HTTP {status}")
        samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples

    def metric(self, name: str, **labels: str) -> float:
        """One sample's value; 0 if it has not been emitted yet (counters with unseen labels)."""
        return self.metrics().get((name, tuple(sorted(labels.items()))), 0.0)


# ---------------------------------------------------------------------------------------- topology
@dataclass(frozen=True)
class NodeInfo:
    name: str
    block: str
    rack: str
    gpus: int


@dataclass
class Topology:
    """The GPU nodes of the cluster grouped into blocks and racks."""

    nodes: dict[str, NodeInfo]
    racks: dict[str, list[str]] = field(default_factory=dict)  # rack -> node names (sorted)
    blocks: dict[str, list[str]] = field(default_factory=dict)  # block -> rack names (sorted)

    @classmethod
    def discover(cls, kube: Kube, settings: Settings) -> Topology:
        nodes: dict[str, NodeInfo] = {}
        unlabelled: list[str] = []
        for node in kube.nodes():
            meta, status = node["metadata"], node.get("status") or {}
            gpus = _quantity_int((status.get("allocatable") or {}).get(settings.gpu_resource, "0"))
            if gpus <= 0 or (node.get("spec") or {}).get("unschedulable"):
                continue
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in status.get("conditions") or [])
            if not ready:
                continue
            labels = meta.get("labels") or {}
            block, rack = labels.get(settings.block_label), labels.get(settings.rack_label)
            if not block or not rack:
                unlabelled.append(meta["name"])
                continue
            nodes[meta["name"]] = NodeInfo(meta["name"], block, rack, gpus)
        if unlabelled:
            raise RuntimeError(f"GPU nodes without {settings.block_label}/{settings.rack_label} labels: "
                               f"{sorted(unlabelled)}; the topology assertions need every GPU node labelled")
        topo = cls(nodes)
        racks: dict[str, list[str]] = defaultdict(list)
        blocks: dict[str, set[str]] = defaultdict(set)
        for info in nodes.values():
            racks[info.rack].append(info.name)
            blocks[info.block].add(info.rack)
        topo.racks = {r: sorted(ns) for r, ns in sorted(racks.items())}
        topo.blocks = {b: sorted(rs) for b, rs in sorted(blocks.items())}
        return topo

    # -- shape
    @property
    def gpus_per_node(self) -> int:
        return min(n.gpus for n in self.nodes.values())

    @property
    def nodes_per_rack(self) -> int:
        return min(len(ns) for ns in self.racks.values())

    @property
    def racks_per_block(self) -> int:
        return min(len(rs) for rs in self.blocks.values())

    @property
    def rack_gpus(self) -> int:
        return self.gpus_per_node * self.nodes_per_rack

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes.values())

    def homogeneous(self) -> bool:
        return (len({n.gpus for n in self.nodes.values()}) == 1
                and len({len(ns) for ns in self.racks.values()}) == 1
                and len({len(rs) for rs in self.blocks.values()}) == 1)

    def shortfall(self, blocks: int = 1, racks_per_block: int = 1, nodes_per_rack: int = 1,
                  gpus_per_node: int = 1) -> str | None:
        """Why this topology cannot run a scenario, or None when it can."""
        if not self.nodes:
            return "no Ready GPU nodes"
        if not self.homogeneous():
            return "the scenarios size gangs from a homogeneous topology (same GPUs per node, nodes per rack)"
        needs = [("blocks", len(self.blocks), blocks),
                 ("racks per block", self.racks_per_block, racks_per_block),
                 ("nodes per rack", self.nodes_per_rack, nodes_per_rack),
                 ("GPUs per node", self.gpus_per_node, gpus_per_node)]
        missing = [f"{what} {have} < {need}" for what, have, need in needs if have < need]
        return ", ".join(missing) or None

    def rack_of(self, node: str) -> str:
        return self.nodes[node].rack

    def block_of(self, node: str) -> str:
        return self.nodes[node].block

    def describe(self) -> str:
        return (f"{len(self.blocks)} blocks x {self.racks_per_block} racks x {self.nodes_per_rack} nodes x "
                f"{self.gpus_per_node} GPUs ({len(self.nodes)} nodes, {self.total_gpus} GPUs)")


def gpu_usage(pods: Iterable[Mapping[str, Any]], gpu_resource: str, nodes: Iterable[str]) -> dict[str, int]:
    """GPUs requested by non-terminal pods bound to each of ``nodes``."""
    wanted = set(nodes)
    used: dict[str, int] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in wanted or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        gpus = pod_gpus(pod, gpu_resource)
        if gpus:
            used[node] = used.get(node, 0) + gpus
    return used


def pod_gpus(pod: Mapping[str, Any], gpu_resource: str) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get(gpu_resource) or (resources.get("limits") or {}).get(
            gpu_resource)
        total += _quantity_int(amount or "0")
    return total


def _quantity_int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


# --------------------------------------------------------------------------------------- manifests
def pod_manifest(
    settings: Settings,
    name: str,
    *,
    gpus: int = 1,
    cpu: str = "1",
    gang: str | None = None,
    min_count: int | None = None,
    required: str | None = None,
    preferred: str | None = None,
    pod_group: str | None = None,
    blocked: bool = False,
    node_selector: Mapping[str, str] | None = None,
    node_name: str | None = None,
    role: str = "member",
) -> dict[str, Any]:
    """A pause pod asking Quorum's profile for ``gpus`` GPUs, optionally as a gang member."""
    annotations: dict[str, str] = {}
    if gang:
        annotations[ANN_GANG] = gang
        if min_count is not None:
            annotations[ANN_MIN_COUNT] = str(min_count)
        if required:
            annotations[ANN_REQUIRED] = required
        if preferred:
            annotations[ANN_PREFERRED] = preferred
    requests = {"cpu": cpu}
    limits: dict[str, str] = {}
    if gpus:
        requests[settings.gpu_resource] = limits[settings.gpu_resource] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": settings.scheduler_name,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": settings.image,
                        "resources": {"requests": requests, "limits": limits}}],
        # kwok's conventional taint and the GPU operator's; harmless where absent.
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"},
                        {"key": settings.gpu_resource, "operator": "Exists"}],
    }
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    selector = dict(node_selector or {})
    if blocked:
        # kube-scheduler's own filters reject this pod until some node carries the label, so the
        # pod exists (and counts for its gang) but never reaches Quorum: its gang mates wait at bind.
        selector[ADMIT_LABEL] = ADMIT_VALUE
    if selector:
        spec["nodeSelector"] = selector
    if node_name:
        spec["nodeName"] = node_name
    labels = {E2E_LABEL: "true", ROLE_LABEL: role}
    if gang or pod_group:
        labels["e2e.quorum.dev/gang"] = gang or pod_group or ""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "annotations": annotations}, "spec": spec}


def wait(condition: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Poll ``condition`` until it returns something truthy; return it, or None on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)
