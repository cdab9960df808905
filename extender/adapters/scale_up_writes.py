"""The writes of topology-aware scale-up, a part of the one Kubernetes client (``kube.py``).

A ProvisioningRequest names PodTemplates in its namespace; Quorum makes one PodTemplate per request
(same name) whose pod asks for a gang member's resources on nodes of one domain, and labels both as
its own so that a later Quorum can find and delete what it left.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import orjson

from .gang_writes import Write

log = logging.getLogger(__name__)

_OURS = {"app.kubernetes.io/managed-by": "quorum"}
_PAUSE = "registry.k8s.io/pause:3.10"
_POD_LEVEL = ("cpu", "memory", "ephemeral-storage")


def _quantities(requests: dict[str, int]) -> tuple[dict[str, str], dict[str, str]]:
    """Requests and limits of the template's container: cpu in millicores; extended resources
    (GPUs) need limits equal to their requests. DRA device kinds have no place in a pod spec."""
    req: dict[str, str] = {}
    for name, amount in requests.items():
        if name.startswith("devices:") or amount <= 0:
            continue
        req[name] = f"{amount}m" if name == "cpu" else str(amount)
    limits = {n: v for n, v in req.items() if n not in _POD_LEVEL and not n.startswith("hugepages-")}
    return req, limits


class ScaleUpWrites:
    """Held by ``KubeClient``: create and delete a gang's ProvisioningRequest."""

    def __init__(self, write: Write) -> None:
        self.write = write

    async def create_scale_up(self, namespace: str, name: str, gang: str,
                              node_selector: dict[str, str], requests: dict[str, int], count: int,
                              class_name: str, together: str = "") -> bool:
        """``together``: a node label all the request's pods must share (pod affinity), when no
        value of it can be named yet."""
        req, limits = _quantities(requests)
        meta = {"name": name, "namespace": namespace, "labels": _OURS,
                "annotations": {"quorum.dev/gang": gang}}
        pod_labels = {**_OURS, "quorum.dev/scale-up": name[:63]}
        spec: dict[str, Any] = {"nodeSelector": node_selector, "tolerations": [{"operator": "Exists"}],
                                "containers": [{"name": "member", "image": _PAUSE,
                                                "resources": {"requests": req, "limits": limits}}]}
        if together:
            spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"quorum.dev/scale-up": name[:63]}},
                 "topologyKey": together}]}}
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta,
                    "template": {"metadata": {"labels": pod_labels}, "spec": spec}}
        request = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "metadata": meta,
                   "spec": {"provisioningClassName": class_name,
                            "podSets": [{"podTemplateRef": {"name": name}, "count": count}]}}
        made = await _post(self.write, f"/api/v1/namespaces/{namespace}/podtemplates", template, name)
        requests_path = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{namespace}/provisioningrequests"
        return made and await _post(self.write, requests_path, request, name)

    async def delete_scale_up(self, namespace: str, name: str) -> bool:
        gone = True
        for path in (f"/apis/autoscaling.x-k8s.io/v1/namespaces/{namespace}/provisioningrequests/{name}",
                     f"/api/v1/namespaces/{namespace}/podtemplates/{name}"):
            status = await _send(self.write, "DELETE", path, b"", name)
            gone = gone and status in (200, 202, 404)
        return gone


async def _post(write: Write, path: str, body: dict[str, Any], name: str) -> bool:
    status = await _send(write, "POST", path, orjson.dumps(body), name)
    return status in (200, 201, 409)  # 409: made already (a retry, or an earlier Quorum)


async def _send(write: Write, method: str, path: str, body: bytes, name: str) -> int:
    try:
        status, text = await write(method, path, body, "application/json")
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.warning("scale-up request write failed", extra={"request": name, "error": str(exc)})
        return 0
    if status not in (200, 201, 202, 404, 409):
        log.warning("scale-up request write failed",
                    extra={"request": name, "status": status, "error": text[:300].decode(errors="replace")})
    return status
