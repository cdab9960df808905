"""Gang members and gang objects in every convention Quorum reads, for the end-to-end tests.

Each member carries the suite's own label and annotation naming its gang and the size its
convention declares, so the suite's watcher checks every gang for partial binding whatever
convention declared it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .scenario import E2E_GANG_LABEL, E2E_MIN_COUNT, Scenario

COSCHEDULING = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")
WORKLOAD_V1ALPHA1 = ("scheduling.k8s.io", "v1alpha1", "workloads")
PODGROUP_V1ALPHA2 = ("scheduling.k8s.io", "v1alpha2", "podgroups")
KUEUE = "kueue.x-k8s.io/"


def member(sc: Scenario, gang: str, index: int, min_count: int, *, gpus: int,
           labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None,
           spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A member ``<gang>-<index>``: a pause pod of Quorum's profile with the convention's fields."""
    pod = sc.pod(f"{gang}-{index}", gpus=gpus)
    meta = pod["metadata"]
    meta["labels"].update({E2E_GANG_LABEL: gang, **(labels or {})})
    meta["annotations"].update({E2E_MIN_COUNT: str(min_count), **(annotations or {})})
    pod["spec"].update(spec or {})
    return pod


def create_object(sc: Scenario, api: tuple[str, str, str], name: str, spec: Mapping[str, Any]) -> None:
    group, version, plural = api
    kind = "Workload" if plural == "workloads" else "PodGroup"
    body = {"apiVersion": f"{group}/{version}", "kind": kind,
            "metadata": {"name": name, "namespace": sc.ns}, "spec": dict(spec)}
    sc.kube.custom.create_namespaced_custom_object(group, version, sc.ns, plural, body, _request_timeout=30)


def all_but_last_wait(sc: Scenario, pods: list[dict[str, Any]], what: str, seconds: float = 6) -> list[str]:
    """Create every member but the last and check none binds (the gang is short of its quorum);
    then create the last one. Returns the member names."""
    names = sc.create(pods[:-1])
    sc.assert_unbound_for(names, seconds, what=f"{what}: {len(names)} of {len(pods)} members (below quorum)")
    return names + sc.create(pods[-1:])
