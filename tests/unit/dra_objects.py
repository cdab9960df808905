"""Builders of resource.k8s.io/v1 objects as the apiserver serves them (DRA devices for kwok nodes)."""

from __future__ import annotations

import copy
from typing import Any

DRIVER = "gpu.example.com"
API = "resource.k8s.io/v1"


def device_class(name: str = DRIVER, expression: str | None = None) -> dict[str, Any]:
    expression = expression if expression is not None else f'device.driver == "{DRIVER}"'
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def resource_slice(node: str, devices: int = 8, *, driver: str = DRIVER, model: str = "a100",
                   memory: str = "80Gi") -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": model}},
                                  "capacity": {"memory": {"value": memory}}} for i in range(devices)]}}


def exactly(count: int, class_name: str = DRIVER, selectors: tuple[str, ...] = (),
            mode: str = "ExactCount") -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": class_name, "allocationMode": mode}
    if mode == "ExactCount":
        request["count"] = count
    if selectors:
        request["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": "gpu", "exactly": request}


def claim_spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def template(name: str, *requests: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(*requests)}}


def claim(name: str, *requests: dict[str, Any], namespace: str = "ml", owner_uid: str = "",
          allocated_on: str = "", devices: range = range(0)) -> dict[str, Any]:
    """A ResourceClaim; ``allocated_on`` with ``devices`` gives it an allocation on that node's slice."""
    obj: dict[str, Any] = {"apiVersion": API, "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": namespace, "uid": f"claim-{name}"},
                           "spec": claim_spec(*requests), "status": {}}
    if owner_uid:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                               "uid": owner_uid, "controller": True}]
    if allocated_on:
        obj["status"]["allocation"] = {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": allocated_on,
                                     "device": f"gpu-{i}"} for i in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}]}}
        if owner_uid:
            obj["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": owner_uid}]
    return obj


def with_template(pod: dict[str, Any], template_name: str, made: str = "") -> dict[str, Any]:
    """The pod asking for a claim from a template (``made``: the claim the controller created)."""
    out = copy.deepcopy(pod)
    out["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template_name}]
    out["spec"]["containers"][0]["resources"].setdefault("claims", [{"name": "gpu"}])
    if made:
        out["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": made}]
    return out


def with_claim(pod: dict[str, Any], claim_name: str) -> dict[str, Any]:
    """The pod naming one existing claim (shared when several pods name it)."""
    out = copy.deepcopy(pod)
    out["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return out
