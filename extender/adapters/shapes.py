"""Shape checks for the JSON values of an extender request.

Every field the records and gang sources read from an embedded Pod is checked here, so a
hand-made or corrupted request cannot reach code that would fail on a wrong type (a 500) or
recurse through a deeply nested value (``str()`` of a 1,000-deep list raises RecursionError).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class WireError(ValueError):
    """A request that does not match the extender protocol; answered with HTTP 400."""


def object_or_null(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"{where}: must be an object")
    return value


def list_or_null(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError(f"{where}: must be a list")
    return value


def string_or_null(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WireError(f"{where}: must be a string")
    return value


def integer_or_null(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{where}: must be an integer")
    return value


def strings(mapping: dict[str, Any], keys: Iterable[str], where: str) -> None:
    """Optional string fields: absent or null is fine, anything else but a string is not."""
    for key in keys:
        value = mapping.get(key)
        if value is not None and not isinstance(value, str):
            raise WireError(f"{where}.{key}: must be a string")


def string_map(value: Any, where: str) -> None:
    mapping = object_or_null(value, where)
    if not all(isinstance(v, str) for v in mapping.values()):
        raise WireError(f"{where}: values must be strings")


def check_metadata(meta: Any) -> None:
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise WireError("Pod.metadata.name: required")
    strings(meta, ("namespace", "uid", "creationTimestamp"), "Pod.metadata")
    string_map(meta.get("annotations"), "Pod.metadata.annotations")
    string_map(meta.get("labels"), "Pod.metadata.labels")


def check_resources(value: Any, where: str, parts: tuple[str, ...]) -> None:
    resources = object_or_null(value, where)
    for part in parts:
        object_or_null(resources.get(part), f"{where}.{part}")


def check_containers(spec: dict[str, Any], key: str) -> None:
    for i, container in enumerate(list_or_null(spec.get(key), f"Pod.spec.{key}")):
        where = f"Pod.spec.{key}[{i}]"
        if not isinstance(container, dict):
            raise WireError(f"{where}: must be an object")
        check_resources(container.get("resources"), f"{where}.resources", ("requests", "limits"))


def check_spec(spec: dict[str, Any]) -> None:
    group = object_or_null(spec.get("schedulingGroup"), "Pod.spec.schedulingGroup")
    strings(group, ("podGroupName",), "Pod.spec.schedulingGroup")
    ref = object_or_null(spec.get("workloadRef"), "Pod.spec.workloadRef")  # 1.35
    strings(ref, ("name", "podGroup", "podGroupReplicaKey"), "Pod.spec.workloadRef")
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise WireError("Pod.spec.priority: must be an integer")
    check_containers(spec, "containers")
    check_containers(spec, "initContainers")
    object_or_null(spec.get("overhead"), "Pod.spec.overhead")
    strings(spec, ("nodeName", "schedulerName"), "Pod.spec")
    list_or_null(spec.get("schedulingGates"), "Pod.spec.schedulingGates")
    check_resources(spec.get("resources"), "Pod.spec.resources", ("requests",))
