"""The cluster every fuzz run answers for: a small topology with gangs in every interesting state.

12 nodes (2 blocks x 2 racks x 3 hosts, 8 GPUs each); a PodGroup gang with enough members to
place, one still waiting for members, an annotation gang, a basic group, a gang running at exactly
its quorum (so preemption must protect it) and plain running pods to serve as victims.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from extender.cluster.cache import ClusterCache
from extender.cluster.records import PodRecord
from extender.config import Config, GangTimings
from extender.gang.coordinator import BindFailed, Coordinator
from extender.metrics import Metrics
from tests.unit.fixtures import LEVEL_LABELS, FakeActions, make_pod, make_podgroup, node_names, topology_nodes

RACK = "topology.quorum.dev/rack"

NODES = topology_nodes(blocks=2, racks=2, per_rack=3)
NODE_NAMES = node_names(NODES)

# Short enough that a held bind is answered (with a timeout error) well inside the hang bound.
FUZZ_CONFIG = Config(gang=GangTimings(bind_timeout_seconds=0.2, backoff_base_seconds=0.5,
                                      backoff_max_seconds=2.0))


def podgroups() -> list[dict[str, Any]]:
    return [
        make_podgroup("train-a", 2, topology_key=RACK),
        make_podgroup("train-b", 3),
        make_podgroup("serve", 2),
        make_podgroup("notebooks", None),
    ]


def pods() -> list[dict[str, Any]]:
    """Pending gang members, a gated member, a running gang at quorum and running plain pods."""
    out = [make_pod(f"train-a-{i}", f"uid-train-a-{i}", group="train-a", gpus=4) for i in range(3)]
    out += [make_pod(f"train-b-{i}", f"uid-train-b-{i}", group="train-b", gpus=8) for i in range(2)]
    gated = make_pod("train-b-2", "uid-train-b-2", group="train-b", gpus=8)
    gated["spec"]["schedulingGates"] = [{"name": "queue.example.com/admission"}]
    out.append(gated)
    out += [make_pod(f"sweep-{i}", f"uid-sweep-{i}", gang_annotation="sweep", min_count=2, gpus=2,
                     annotations={"quorum.dev/required-topology": "rack"}) for i in range(2)]
    out += [make_pod(f"serve-{i}", f"uid-serve-{i}", group="serve", node=NODE_NAMES[i], phase="Running",
                     gpus=4) for i in range(2)]
    out += [make_pod(f"plain-{i}", f"uid-plain-{i}", node=NODE_NAMES[3 + i], phase="Running", gpus=2)
            for i in range(3)]
    out.append(make_pod("notebook-0", "uid-notebook-0", group="notebooks", gpus=1))
    return out


_POD_BY_UID = {p["metadata"]["uid"]: orjson.dumps(p) for p in pods()}


class FuzzActions(FakeActions):
    """The Kubernetes client as the apiserver would behave, without unbounded history.

    A binding for a pod the cluster does not have is refused (404 upstream); an accepted one is
    delivered back as a watch event shortly after, like the informer would. Counts only.
    """

    def __init__(self, cache: ClusterCache) -> None:
        super().__init__()
        self.cache = cache
        self.bind_count = 0
        self.requeue_count = 0

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        await asyncio.sleep(0)
        record = self.cache.pods.get(uid)
        if record is None or record.name != name or record.namespace != namespace:
            raise BindFailed(f'pods "{name}" not found')
        if node not in self.cache.nodes:
            raise BindFailed(f'nodes "{node}" not found')
        self.bind_count += 1
        asyncio.get_running_loop().call_soon(self._watch_sees_bound, uid, node)

    def _watch_sees_bound(self, uid: str, node: str) -> None:
        template = _POD_BY_UID.get(uid)
        if template is not None:
            obj = orjson.loads(template)
            obj["spec"]["nodeName"] = node
            obj["status"] = {"phase": "Running"}
            self.cache.upsert_pod(obj)

    async def requeue_pods(self, pods: list[PodRecord], reason: str,
                           wanted: Callable[[PodRecord], bool]) -> None:
        self.requeue_count += 1


@dataclass
class World:
    cache: ClusterCache
    coordinator: Coordinator
    metrics: Metrics
    actions: FuzzActions
    pods: list[dict[str, Any]] = field(default_factory=pods)

    def relist(self) -> None:
        """Back to the starting state, the way a relist replaces the cache's objects."""
        self.cache.replace_nodes(NODES)
        self.cache.replace_podgroups(podgroups())
        self.cache.replace_pods(pods())


def build_world() -> World:
    cache = ClusterCache(LEVEL_LABELS)
    metrics = Metrics()
    actions = FuzzActions(cache)
    coordinator = Coordinator(FUZZ_CONFIG, cache, actions, metrics)
    world = World(cache, coordinator, metrics, actions)
    world.relist()
    return world
