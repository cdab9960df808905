"""Helpers of the install suite (test_helm_install.py): the tools, gangs as plain pods, waits.

The install suite runs on a cluster started with ``hack/cluster-up.sh --real-node --no-scheduler``:
no process-started scheduler or Quorum, one real node (kubelet + containerd) that runs the
installed release's pods, and kwok nodes for the gangs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlparse

from .cluster import ANN_GANG, ANN_MIN_COUNT, REPO_ROOT, Kube

REAL_NODE_LABEL = "quorum.dev/real-node"
ANN_REQUIRED = "quorum.dev/required-topology"


def tool(name: str, env: str) -> str:
    """A binary the test command built: helm (.cache/bin/helm-*), kubectl (.cache/bin/<version>),
    else the one on the PATH."""
    built = sorted((REPO_ROOT / ".cache" / "bin").glob(f"*/{name}"))
    found = os.environ.get(env) or (str(built[-1]) if built else "") or shutil.which(name) or ""
    assert found, f"{name} not found: set {env} or build it (hack/build-binaries.sh, hack/build-helm.sh)"
    return found


def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def apiserver_for_pods(kube: Kube) -> list[dict[str, str]]:
    """The environment that points in-cluster clients at the apiserver: on the real node's bridge
    address (hack/lib/real-node.sh), since nothing routes the ``kubernetes`` Service's cluster IP."""
    cidr = os.environ.get("NODE_POD_CIDR", "10.244.0.0/24")
    port = urlparse(kube.configuration.host).port or 443
    return [{"name": "KUBERNETES_SERVICE_HOST", "value": cidr.rsplit(".", 1)[0] + ".1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)}]


def on_the_real_node() -> dict[str, Any]:
    return {"nodeSelector": {REAL_NODE_LABEL: "true"},
            "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}]}


def gang_pods(name: str, size: int, min_count: int, scheduler: str, gpus: int = 1,
              required: str = "") -> list[dict[str, Any]]:
    """Annotated gang members (the shortest declaration the README shows)."""
    annotations = {ANN_GANG: name, ANN_MIN_COUNT: str(min_count)}
    if required:
        annotations[ANN_REQUIRED] = required
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-{i}", "annotations": annotations, "labels": {"gang": name}},
        "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                 "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]},
    } for i in range(size)]


def create(kube: Kube, namespace: str, pods: Iterable[dict[str, Any]]) -> None:
    for pod in pods:
        kube.core.create_namespaced_pod(namespace, pod, _request_timeout=30)


def bound(kube: Kube, namespace: str, gang: str) -> list[dict[str, Any]]:
    return [p for p in kube.pods(namespace, f"gang={gang}") if p["spec"].get("nodeName")]


def wait_until(what: str, check: Callable[[], bool], timeout: float, step: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(step)


def ready_pods(kube: Kube, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Pods of ``selector`` whose every container is ready and that are not being deleted."""
    pods = kube.pods(namespace, selector)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True"
                    for c in p.get("status", {}).get("conditions", []))]


def lease_holder(kube: Kube, namespace: str, name: str) -> str:
    """The pod that holds kube-scheduler's lease (its identity is ``<pod>_<uuid>``), or ''."""
    try:
        lease = kube.raw(_coordination(kube).read_namespaced_lease, name, namespace)
    except Exception:
        return ""
    return str(lease.get("spec", {}).get("holderIdentity") or "").split("_", 1)[0]


def _coordination(kube: Kube) -> Any:
    from kubernetes import client

    return client.CoordinationV1Api(kube.api)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def service_endpoints(kube: Kube, namespace: str, service: str) -> list[tuple[str, int]]:
    """Ready addresses and ports behind ``service``, as Prometheus' service discovery finds them."""
    slices = kube.raw(_discovery(kube).list_namespaced_endpoint_slice, namespace,
                      label_selector=f"kubernetes.io/service-name={service}")["items"]
    found = []
    for piece in slices:
        ports = [p["port"] for p in piece.get("ports") or []]
        for endpoint in piece.get("endpoints") or []:
            if endpoint.get("conditions", {}).get("ready"):
                found += [(address, port) for address in endpoint["addresses"] for port in ports]
    return found


def _discovery(kube: Kube) -> Any:
    from kubernetes import client

    return client.DiscoveryV1Api(kube.api)


def binders(namespace: str) -> set[str]:
    """Who created the bindings of the pods of ``namespace``: the local apiserver audits every
    binding (hack/cluster-up.sh) with the user that made it."""
    log = REPO_ROOT / ".cache" / "cluster" / "logs" / "audit.log"
    users = set()
    for line in log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if ref.get("namespace") == namespace and ref.get("subresource") == "binding" and \
                event.get("verb") == "create":
            users.add(str(event["user"]["username"]))
    return users


def objects_labelled(kubectl: str, kubeconfig: str, selector: str) -> list[str]:
    """Every object of every listable kind, in every namespace, that carries ``selector``."""
    kinds = run(kubectl, "--kubeconfig", kubeconfig, "api-resources", "--verbs=list", "-o", "name")
    assert kinds.returncode == 0, kinds.stderr
    names = ",".join(k for k in kinds.stdout.split() if k not in ("events", "events.events.k8s.io"))
    done = run(kubectl, "--kubeconfig", kubeconfig, "get", names, "-A", "-l", selector, "-o", "name")
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def left_after(kubectl: str, kubeconfig: str, selector: str, seconds: float = 90) -> list[str]:
    """What still carries ``selector`` once it had ``seconds`` to go: a Deployment's pods are
    deleted by the garbage collector after the Deployment and then terminate gracefully, so an
    uninstall that returned has not yet removed them."""
    deadline = time.monotonic() + seconds
    left = objects_labelled(kubectl, kubeconfig, selector)
    while left and time.monotonic() < deadline:
        time.sleep(2)
        left = objects_labelled(kubectl, kubeconfig, selector)
    return left


def flow_schema_of(kube: Kube, namespace: str, account: str) -> tuple[str, str]:
    """Which FlowSchema (uid) API Priority and Fairness put a request of ``account`` in, and the
    request's status: the apiserver names it in every answer (X-Kubernetes-PF-FlowSchema-UID)."""
    import copy

    from kubernetes import client

    token = kube.core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 600}}, _request_timeout=30).status.token
    configuration = copy.deepcopy(kube.configuration)
    configuration.cert_file = configuration.key_file = None
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with client.ApiClient(configuration) as api:
        response = client.CoreV1Api(api).list_namespaced_pod(
            namespace, limit=1, _preload_content=False, _request_timeout=30)
        return str(response.headers.get("X-Kubernetes-PF-FlowSchema-UID", "")), str(response.status)


def flow_schema(kube: Kube, name: str) -> dict[str, Any]:
    found = kube.custom.get_cluster_custom_object("flowcontrol.apiserver.k8s.io", "v1", "flowschemas", name)
    return dict(found)
