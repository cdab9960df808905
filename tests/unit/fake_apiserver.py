"""The one fake apiserver of the unit tests, and the one fake of the writes Quorum makes.

``FakeActions`` stands in for the client the gang core writes through (binds, requeue nudges,
evictions, Events, PodGroup conditions, annotations, ConfigMaps, scale-up requests) and records
what it was asked. ``FakeApiserver`` is a ``FakeActions`` that also serves the reads Quorum's
informers make (discovery, lists, watches), so it can stand in for the whole Kubernetes client;
and it answers over HTTP, recording every request, for the tests of the client itself.

Nothing here imports Quorum at module level: ``hack/regressions-on-old-code.sh`` copies this module
with the black-box harness into older trees, whose modules are laid out differently.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from .payloads import merge_annotations

if TYPE_CHECKING:
    from extender.gang.effects import GangCondition, ObjectRef

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1/podgroups"
# DRA objects (resource.k8s.io/v1), watched since Quorum counts devices; empty unless a test adds some.
DEVICE_KINDS = tuple(f"/apis/resource.k8s.io/v1/{plural}" for plural in
                     ("deviceclasses", "resourceslices", "resourceclaimtemplates", "resourceclaims"))


def _bind_failed(message: str) -> Exception:
    """Quorum's refused-binding error, imported only when a test refuses one (see the module doc)."""
    from extender.gang.core import BindFailed
    return BindFailed(message)


def _eviction_failed(message: str) -> Exception:
    from extender.gang.core import EvictionFailed
    return EvictionFailed(message)


class Cluster(Protocol):
    """A model of the cluster that Quorum's writes change, for tests that keep one (the stateful
    machine's ``ClusterModel``). It decides a binding's fate and applies what it accepts."""

    async def bind_call(self, namespace: str, name: str, uid: str, node: str,
                        caller_alive: Callable[[], bool]) -> None: ...

    def evict(self, uid: str) -> None: ...

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool: ...

    def annotate_gang(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool: ...


class FakeActions:
    """Stands in for the Kubernetes client's writes and records each one.

    ``refuse`` makes the apiserver refuse a pod's binding (BindFailed with that message); ``crash``
    makes the call fail with an unexpected error; a pod named in ``refuse_eviction`` is not evicted
    (EvictionFailed, as when a PodDisruptionBudget does not allow it: dry runs are refused too);
    ``refuse_dry_run`` refuses only the dry runs of a pod, ``refuse_real_eviction`` only its real
    evictions (a budget that changed between the two); ``budgets`` names the budget a refusal of a
    pod names. Dry runs are recorded in ``dry_runs`` and change nothing. ``alive`` turns False when the
    process making the calls is gone: its bindings are refused, its other writes change nothing.

    Without a ``cluster``, binds and evictions reach no cache: tests deliver them like a watch
    would, when they choose to. With one, every accepted write is applied to it as well.
    """

    def __init__(self, cluster: Cluster | None = None) -> None:
        self.cluster = cluster
        self.alive = True
        self.binds: list[tuple[str, str, str, str]] = []  # (namespace, name, uid, node)
        self.requeues: list[tuple[list[str], str]] = []  # (pod names, reason)
        self.refuse: dict[str, str] = {}  # pod name -> error message
        self.crash: set[str] = set()
        self.evictions: list[tuple[str, str, str, str]] = []  # (namespace, name, uid, reason)
        self.refuse_eviction: set[str] = set()  # pod names
        self.refuse_dry_run: set[str] = set()
        self.refuse_real_eviction: set[str] = set()
        self.budgets: dict[str, str] = {}  # pod name -> the PodDisruptionBudget its refusal names
        self.dry_runs: list[str] = []  # pod names
        self.refused: list[str] = []  # pod names whose real eviction was refused, in order
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
            raise _bind_failed(self.refuse[name])
        if name in self.crash:
            raise ConnectionResetError("connection reset by peer")
        if self.cluster is not None:  # the model decides: the call was under way when the process went
            await self.cluster.bind_call(namespace, name, uid, node, lambda: self.alive)
        elif not self.alive:
            raise _bind_failed(f"binding {namespace}/{name}: Quorum restarted")
        self.binds.append((namespace, name, uid, node))

    async def requeue_pods(self, pods: list[Any], reason: str, wanted: Callable[[Any], bool]) -> None:
        # As the client does once a write slot is free: a pod bound meanwhile gets no nudge.
        self.requeues.append(([p.name for p in pods if wanted(p)], reason))

    async def evict_pod(self, namespace: str, name: str, uid: str, reason: str,
                        grace_seconds: int | None = None, dry_run: bool = False) -> None:
        await asyncio.sleep(0)
        refused = self.refuse_eviction | (self.refuse_dry_run if dry_run else self.refuse_real_eviction)
        if name in refused:
            if not dry_run:
                self.refused.append(name)
            budget = f" (The disruption budget {self.budgets[name]} needs 1 healthy pods)" \
                if name in self.budgets else ""
            raise _eviction_failed(f"evicting {namespace}/{name}: Cannot evict pod as it would violate the "
                                   f"pod's disruption budget.{budget}")
        if dry_run:
            self.dry_runs.append(name)
            return
        if not self.alive:
            return
        if self.cluster is not None:
            self.cluster.evict(uid)
        self.evictions.append((namespace, name, uid, reason))

    def record_event(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append((regarding, type_, reason, action, note))

    async def set_gang_conditions(self, home: Any, conditions: list[GangCondition]) -> None:
        self.conditions[f"{home.namespace}/{home.name}"] = list(conditions)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        if not self.alive or (self.cluster is not None
                              and not self.cluster.annotate_pod(namespace, name, annotations)):
            return False
        merge_annotations(self.pod_annotations.setdefault(f"{namespace}/{name}", {}), annotations)
        return True

    async def annotate_gang(self, home: Any, annotations: dict[str, str | None]) -> bool:
        namespace, name = home.namespace, home.name
        if not self.alive or (self.cluster is not None
                              and not self.cluster.annotate_gang(namespace, name, annotations)):
            return False
        merge_annotations(self.annotations.setdefault(f"{namespace}/{name}", {}), annotations)
        return True

    async def write_started_configmap(self, namespace: str, name: str, owner: Any,
                                      data: dict[str, str]) -> bool:
        if self.alive:
            self.configmaps[f"{namespace}/{name}"] = {"owner": owner, "data": dict(data)}
        return self.alive

    async def delete_started_configmap(self, namespace: str, name: str) -> bool:
        if self.alive:
            self.configmaps.pop(f"{namespace}/{name}", None)
            self.deleted_configmaps.append(f"{namespace}/{name}")
        return self.alive

    async def create_scale_up(self, namespace: str, name: str, gang: str, node_selector: dict[str, str],
                              requests: dict[str, int], count: int, class_name: str,
                              together: str = "") -> bool:
        if self.alive:
            self.scale_ups[f"{namespace}/{name}"] = {"gang": gang, "selector": dict(node_selector),
                                                     "requests": dict(requests), "count": count,
                                                     "together": together}
        return self.alive

    async def delete_scale_up(self, namespace: str, name: str) -> bool:
        if self.alive:
            self.scale_ups.pop(f"{namespace}/{name}", None)
            self.deleted_scale_ups.append(f"{namespace}/{name}")
        return self.alive

    @property
    def bound(self) -> list[tuple[str, str]]:
        """(pod name, node) of every successful bind, in order."""
        return [(name, node) for _, name, _, node in self.binds]

    @property
    def requeued(self) -> list[str]:
        """Every pod name nudged, in order."""
        return [name for names, _ in self.requeues for name in names]

    @property
    def evicted(self) -> list[str]:
        """Every pod name evicted, in order."""
        return [name for _, name, _, _ in self.evictions]

    def event_reasons(self, name: str) -> list[str]:
        """The reasons of the Events recorded about objects named ``name``, in order."""
        return [reason for regarding, _, reason, _, _ in self.events if regarding.name == name]


# --------------------------------------------------------------------------- reads: lists and watches


class EndWatch:
    """Marker in a watch script: the stream ends normally (apiserver timeout)."""


@dataclass
class _Stream:
    """One kind's live watch: events queued by the test, and whether a watch holds one right now."""

    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    in_hand: bool = False
    open: int = 0


@dataclass
class Request:
    """One request that reached the HTTP face, its JSON body decoded."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    authorization: str = ""


class FakeApiserver(FakeActions):
    """The Kubernetes client's reads on top of its writes, and an HTTP face.

    Lists: ``lists[path]`` are scripted answers, one per call (the last repeats), each
    ``(items, resourceVersion)`` or an exception to raise; without a script a list answers a copy of
    ``objects[path]``. Watches: ``watches[path]`` are scripts, one per watch call, played in order (an
    exception is raised, ``EndWatch`` ends the stream, and a script starting with an exception is a
    watch the apiserver refused: it never opened). After its script, or without one, a watch follows
    the live events given to ``add``/``modify``/``delete`` and raises what ``break_watch`` gives it.
    Discovery serves the resources in ``served`` (the 1.37 PodGroup API, nothing else that declares
    gangs).

    Over HTTP (``app()``) it records every request and answers ``answers[(method, path)]`` or else
    201 to POST and 200 to others, with the Status documents the real apiserver sends (a failure's
    ``details`` from ``details[(method, path)]``); ``scripts[(method, path)]`` are answers given one
    per request before that (a 429 carries ``Retry-After: retry_after``); ``slow`` holds
    each next answer that many seconds, in turn.
    """

    def __init__(self) -> None:
        super().__init__()
        self.objects: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self.lists: dict[str, list[Any]] = {}
        self.watches: dict[str, list[list[Any]]] = {}
        self.streams: defaultdict[str, _Stream] = defaultdict(_Stream)
        self.served: dict[str, list[str]] = {"scheduling.k8s.io/v1beta1": ["podgroups", "workloads"]}
        self.list_calls: list[str] = []
        self.watch_calls: list[tuple[str, str]] = []
        self.requests: list[Request] = []
        self.answers: dict[tuple[str, str], tuple[int, str]] = {}
        self.scripts: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.retry_after = "0"
        self.details: dict[tuple[str, str], dict[str, Any]] = {}  # a failure's Status details
        self.slow: list[float] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.connections: list[asyncio.BaseTransport] = []  # each connection a request came on

    def open_connections(self) -> int:
        """How many of the connections requests came on are still open."""
        return sum(1 for transport in self.connections if not transport.is_closing())

    # ------------------------------------------------------------------ the client's reads
    async def get_json(self, path: str) -> dict[str, Any] | None:
        await asyncio.sleep(0)
        resources = self.served.get(path.removeprefix("/apis/"))
        return None if resources is None else {"resources": [{"name": name} for name in resources]}

    async def list_objects(self, path: str, trim: Callable[[dict[str, Any]], None] | None = None,
                           ) -> tuple[list[dict[str, Any]], str]:
        self.list_calls.append(path)
        await asyncio.sleep(0)
        answers = self.lists.get(path)
        if not answers:
            items, version = json.loads(json.dumps(self.objects[path])), "1"
        else:
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, BaseException):
                raise answer
            items, version = list(answer[0]), answer[1]
        for obj in items if trim is not None else ():
            trim(obj)
        return items, version

    async def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
                    on_open: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        self.watch_calls.append((path, resource_version))
        scripts = self.watches.get(path)
        script = scripts.pop(0) if scripts else []
        await asyncio.sleep(0)
        if script and isinstance(script[0], BaseException):
            raise script[0]  # refused: the watch never opened
        stream = self.streams[path]
        stream.open += 1
        try:
            if on_open is not None:
                on_open()
            for step in script:
                await asyncio.sleep(0)
                if isinstance(step, BaseException):
                    raise step
                if isinstance(step, EndWatch):
                    return
                yield step
            while True:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    raise item
                stream.in_hand = True
                yield item
                stream.in_hand = False
        finally:
            stream.open -= 1
            stream.in_hand = False

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------------ what tests do
    def add(self, path: str, *objects: dict[str, Any]) -> None:
        for obj in objects:
            self.streams[path].queue.put_nowait({"type": "ADDED", "object": obj})

    def modify(self, path: str, obj: dict[str, Any]) -> None:
        self.streams[path].queue.put_nowait({"type": "MODIFIED", "object": obj})

    def delete(self, path: str, obj: dict[str, Any]) -> None:
        self.streams[path].queue.put_nowait({"type": "DELETED", "object": obj})

    def break_watch(self, path: str, error: BaseException) -> None:
        self.streams[path].queue.put_nowait(error)

    def watching(self, path: str) -> bool:
        """A watch of this kind is open (its loop is alive and listening)."""
        return self.streams[path].open > 0

    def drained(self) -> bool:
        """Every live event was taken, and the watch that took it has asked for the next one."""
        return all(s.queue.empty() and not s.in_hand for s in self.streams.values())

    def lists_of(self, path: str) -> int:
        return self.list_calls.count(path)

    # ------------------------------------------------------------------ the HTTP face
    def app(self) -> web.Application:
        """An application answering every path with ``handle``."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(Request(request.method, request.path, dict(request.query),
                                     request.content_type, json.loads(raw) if raw else None,
                                     request.headers.get("Authorization", "")))
        if request.transport is not None and request.transport not in self.connections:
            self.connections.append(request.transport)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.slow:
                await asyncio.sleep(self.slow.pop(0))
        finally:
            self.in_flight -= 1
        route = (request.method, request.path)
        default = (201, "") if request.method == "POST" else (200, "")
        script = self.scripts.get(route)
        status, message = script.pop(0) if script else self.answers.get(route, default)
        headers = {"Retry-After": self.retry_after} if status == 429 else {}
        if status >= 400:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                   "code": status}
            if (request.method, request.path) in self.details:
                doc["details"] = self.details[(request.method, request.path)]
        else:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return web.json_response(doc, status=status, headers=headers)

    def to(self, method: str, path: str) -> list[Request]:
        """The requests of this method to paths under ``path``, in order."""
        return [r for r in self.requests if r.method == method and r.path.startswith(path)]
