"""The one shared set of builders and fakes for the unit tests.

The JSON builders live in ``payloads`` (free of Quorum imports, so black-box tests can run them
against any version) and are re-exported here; this module adds the fakes and the gang core's world.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from extender.cluster.cache import ClusterCache
from extender.cluster.conventions import declared_by_pod, gang_key_of_pod
from extender.cluster.records import GangSpec, PodRecord, pod_record
from extender.config import Config, GangTimings
from extender.gang.coordinator import BindFailed, Coordinator, FilterDecision
from extender.gang.core import EvictionFailed
from extender.gang.effects import GangCondition, ObjectRef
from extender.metrics import Metrics

from .payloads import (
    BLOCK,
    DATA_DIR,
    GANG_POD_UID,
    HOST,
    LEVEL_LABELS,
    RACK,
    VICTIM_UID,
    binding_args,
    bound,
    extender_args,
    gang_pod,
    load,
    make_node,
    make_pod,
    make_podgroup,
    merge_annotations,
    node_names,
    raw,
    topology_nodes,
)

__all__ = [
    "BLOCK", "DATA_DIR", "GANG_POD_UID", "HOST", "LEVEL_LABELS", "RACK", "VICTIM_UID", "FakeActions",
    "World", "binding_args", "bound", "extender_args", "gang_of", "gang_pod", "load", "make_node",
    "make_pod", "make_podgroup", "node_names", "raw", "topology_nodes", "typed",
]


class FakeActions:
    """Stands in for the Kubernetes client: records binds, requeue nudges, evictions, Events,
    PodGroup conditions and annotations.

    ``refuse`` makes the apiserver refuse a pod's binding (BindFailed with that message); ``crash``
    makes the call fail with an unexpected error; a pod named in ``refuse_eviction`` is not evicted
    (EvictionFailed, as when a PodDisruptionBudget does not allow it). Binds and evictions do not
    reach the cache: tests deliver them like a watch would, when they choose to.
    """

    def __init__(self) -> None:
        self.binds: list[tuple[str, str, str, str]] = []  # (namespace, name, uid, node)
        self.requeues: list[tuple[list[str], str]] = []  # (pod names, reason)
        self.refuse: dict[str, str] = {}  # pod name -> error message
        self.crash: set[str] = set()
        self.evictions: list[tuple[str, str, str, str]] = []  # (namespace, name, uid, reason)
        self.refuse_eviction: set[str] = set()  # pod names
        # (regarding, type, reason, action, note)
        self.events: list[tuple[ObjectRef, str, str, str, str]] = []
        self.conditions: dict[str, list[GangCondition]] = {}  # "namespace/name" -> last applied
        self.annotations: dict[str, dict[str, str]] = {}  # "namespace/name" -> annotations as merged
        self.pod_annotations: dict[str, dict[str, str]] = {}  # the same for pods
        self.configmaps: dict[str, dict[str, Any]] = {}  # gang-started ConfigMaps: "ns/name" -> owner, data
        self.deleted_configmaps: list[str] = []
        self.scale_ups: dict[str, dict[str, Any]] = {}  # ProvisioningRequests: "ns/name" -> what was asked
        self.deleted_scale_ups: list[str] = []

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        await asyncio.sleep(0)
        if name in self.refuse:
            raise BindFailed(self.refuse[name])
        if name in self.crash:
            raise ConnectionResetError("connection reset by peer")
        self.binds.append((namespace, name, uid, node))

    async def requeue_pods(self, pods: list[PodRecord], reason: str) -> None:
        self.requeues.append(([p.name for p in pods], reason))

    async def evict_pod(self, namespace: str, name: str, uid: str, reason: str,
                        grace_seconds: int | None = None) -> None:
        await asyncio.sleep(0)
        if name in self.refuse_eviction:
            raise EvictionFailed(f"evicting {namespace}/{name}: a PodDisruptionBudget does not allow it")
        self.evictions.append((namespace, name, uid, reason))

    def record_event(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding, type_, reason, action, note))

    async def set_gang_conditions(self, home: Any, conditions: list[GangCondition]) -> None:
        namespace, name = home.namespace, home.name
        self.conditions[f"{namespace}/{name}"] = list(conditions)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        merge_annotations(self.pod_annotations.setdefault(f"{namespace}/{name}", {}), annotations)
        return True

    async def annotate_gang(self, home: Any, annotations: dict[str, str | None]) -> bool:
        namespace, name = home.namespace, home.name
        merge_annotations(self.annotations.setdefault(f"{namespace}/{name}", {}), annotations)
        return True

    async def write_started_configmap(self, namespace: str, name: str, owner: Any,
                                      data: dict[str, str]) -> bool:
        self.configmaps[f"{namespace}/{name}"] = {"owner": owner, "data": dict(data)}
        return True

    async def create_scale_up(self, namespace: str, name: str, gang: str, node_selector: dict[str, str],
                              requests: dict[str, int], count: int, class_name: str,
                              together: str = "") -> bool:
        self.scale_ups[f"{namespace}/{name}"] = {"gang": gang, "selector": dict(node_selector),
                                                 "requests": dict(requests), "count": count,
                                                 "together": together}
        return True

    async def delete_scale_up(self, namespace: str, name: str) -> bool:
        self.scale_ups.pop(f"{namespace}/{name}", None)
        self.deleted_scale_ups.append(f"{namespace}/{name}")
        return True

    async def delete_started_configmap(self, namespace: str, name: str) -> bool:
        self.configmaps.pop(f"{namespace}/{name}", None)
        self.deleted_configmaps.append(f"{namespace}/{name}")
        return True

    @property
    def evicted(self) -> list[str]:
        """Every pod name evicted, in order."""
        return [name for _, name, _, _ in self.evictions]

    def event_reasons(self, name: str) -> list[str]:
        """The reasons of the Events recorded about objects named ``name``, in order."""
        return [reason for regarding, _, reason, _, _ in self.events if regarding.name == name]

    @property
    def bound(self) -> list[tuple[str, str]]:
        """(pod name, node) of every successful bind, in order."""
        return [(name, node) for _, name, _, node in self.binds]

    @property
    def requeued(self) -> list[str]:
        """Every pod name nudged, in order."""
        return [name for names, _ in self.requeues for name in names]


# --------------------------------------------------------------------------- the gang core's world


def typed(obj: dict[str, Any]) -> tuple[PodRecord, GangSpec | None]:
    """The pod as the wire layer hands it to the core."""
    return pod_record(obj, gang_key_of_pod(obj)), declared_by_pod(obj)


class World:
    """A cache of 2 blocks x racks x nodes (8 GPUs each) with a strict coordinator on top."""

    def __init__(self, timings: GangTimings | None = None, racks: int = 2, nodes_per_rack: int = 2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        config = Config()
        if timings is not None:
            config = replace(config, gang=timings)
        self.cache = ClusterCache(tuple(level.node_label for level in config.levels))
        self.actions = FakeActions()
        self.metrics = Metrics()
        self.coordinator = Coordinator(config, self.cache, self.actions, self.metrics, clock=clock,
                                       strict=True)
        self.metrics.track_state(self.coordinator.phase_counts, self.cache.counts,
                                 self.coordinator.reserved_count, self.coordinator.queue_counts)
        self.names: list[str] = []
        for b in range(2):
            for r in range(racks):
                for n in range(nodes_per_rack):
                    name = f"b{b}-r{r}-n{n}"
                    self.cache.upsert_node(make_node(name, f"b{b}", f"b{b}-r{r}"))
                    self.names.append(name)
        self.pods: dict[str, dict[str, Any]] = {}

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.pods[obj["metadata"]["name"]] = obj
        self.cache.upsert_pod(obj)
        return obj

    def bind_in_cache(self, name: str, node_name: str) -> None:
        """Deliver a binding as the pod watch would."""
        self.pods[name] = bound(self.pods[name], node_name)
        self.cache.upsert_pod(self.pods[name])

    def filter(self, name: str, candidates: list[str] | None = None) -> FilterDecision:
        return self.coordinator.filter(*typed(self.pods[name]),
                                       candidates if candidates is not None else self.names)

    async def bind(self, name: str, node_name: str) -> str:
        obj = self.pods[name]
        return await self.coordinator.bind(obj["metadata"]["namespace"], name, obj["metadata"]["uid"],
                                           node_name)

    def sample(self, metric: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(metric, labels)
        return 0.0 if value is None else value

    def rack_of(self, node_name: str) -> str:
        return self.cache.nodes[node_name].domains[1]


def gang_of(world: World, count: int, min_count: int, prefix: str = "w", **kw: Any) -> list[str]:
    """``count`` annotation members ``<prefix>0..`` of gang ``<prefix>`` added to the world."""
    names = [f"{prefix}{i}" for i in range(count)]
    for name in names:
        world.add(gang_pod(name, gang=prefix, min_count=min_count, **kw))
    return names


async def schedule(world: World, names: list[str]) -> dict[str, str]:
    """kube-scheduler's round for these pods: filter each, bind all, the watch shows them bound."""
    nodes = {}
    for pod_name in names:
        passing = world.filter(pod_name).passing
        assert passing, world.coordinator.reason_of(world.cache.pods[f"uid-{pod_name}"].gang_key or "")
        nodes[pod_name] = passing[0]
    answers = await asyncio.gather(*(world.bind(n, nodes[n]) for n in names))
    assert answers == [""] * len(names), answers
    for pod_name in names:
        world.bind_in_cache(pod_name, nodes[pod_name])
    return nodes
