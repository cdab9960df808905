"""The one shared set of builders and worlds for the unit tests.

The JSON builders live in ``payloads`` and the fakes (``FakeActions``, ``FakeApiserver``) in
``fake_apiserver``, both free of Quorum imports so black-box tests can run them against any
version; they are re-exported here. This module adds the worlds tests start from: the gang core
with a strict coordinator (``World``), and a ``KubeClient`` writing to the fake apiserver over HTTP
(``kube_world``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from aiohttp.test_utils import TestServer

from extender.adapters.bind_connections import BindTiers
from extender.adapters.events import EventRecorder
from extender.adapters.kube import Credentials, KubeClient
from extender.cluster.cache import ClusterCache
from extender.cluster.conventions import declared_by_pod, gang_key_of_pod, yielding_gang_key
from extender.cluster.jobsets import jobset_member
from extender.cluster.records import GangSpec, PodRecord, pod_record
from extender.config import Config, GangTimings
from extender.gang.coordinator import Coordinator, FilterDecision
from extender.metrics import Metrics

from .fake_apiserver import FakeActions, FakeApiserver
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
    node_names,
    raw,
    topology_nodes,
)

__all__ = [
    "BLOCK", "DATA_DIR", "GANG_POD_UID", "HOST", "LEVEL_LABELS", "RACK", "START", "VICTIM_UID",
    "FakeActions", "FakeApiserver", "KubeWorld", "World", "binding_args", "bound", "extender_args",
    "gang_of", "gang_pod", "kube_world", "load", "make_node", "make_pod", "make_podgroup", "node_names",
    "raw", "recorder", "topology_nodes", "typed",
]


# --------------------------------------------------------------------------- the gang core's world


def typed(obj: dict[str, Any]) -> tuple[PodRecord, GangSpec | None]:
    """The pod as the wire layer hands it to the core."""
    named = gang_key_of_pod(obj)
    jobset = jobset_member(obj) if named is None else None
    return pod_record(obj, named, yielding_gang_key(obj), jobset), declared_by_pod(obj)


class World:
    """A cache of 2 blocks x racks x nodes (8 GPUs each) with a strict coordinator on top."""

    def __init__(self, timings: GangTimings | None = None, racks: int = 2, nodes_per_rack: int = 2,
                 clock: Callable[[], float] = time.monotonic, preemption: bool = True) -> None:
        config = Config()
        if timings is not None:
            config = replace(config, gang=timings)
        if not preemption:
            config = replace(config, preemption=replace(config.preemption, enabled=False))
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


# --------------------------------------------------------------------------- a KubeClient's world

START = 1_795_456_800.0  # 2026-11-23T18:00:00Z


class Clock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class KubeWorld:
    """A ``KubeClient`` and the fake apiserver it writes to; clocks are injected, so aggregation
    windows and transition times are exact."""

    api: FakeApiserver
    client: KubeClient
    clock: Clock
    metrics: Metrics


@asynccontextmanager
async def kube_world(bind_tiers: BindTiers | None = None) -> AsyncIterator[KubeWorld]:
    """A fake apiserver on a loopback port and a client (with metrics and a fixed clock) using it."""
    api = FakeApiserver()
    server = TestServer(api.app())
    await server.start_server()
    clock, metrics = Clock(), Metrics()
    host = str(server.make_url("")).rstrip("/")
    client = KubeClient(Credentials(host, False, {"Accept": "application/json"}), metrics=metrics,
                        clock=clock, wall=clock, bind_tiers=bind_tiers)
    client.gang_writes.settle_seconds = 0.0  # each condition write at once (test_kube_effects: the settling)
    try:
        yield KubeWorld(api, client, clock, metrics)
    finally:
        await client.close()
        await server.close()


def recorder(c: KubeWorld, **options: Any) -> EventRecorder:
    """A recorder with non-default limits, writing through the client like its own does."""
    c.client.events = EventRecorder(c.client.write, clock=c.clock, wall=c.clock, instance="test-host",
                                    **options)
    return c.client.events
