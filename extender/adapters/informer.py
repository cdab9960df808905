"""List + watch loops that keep the cache current (one task per kind).

Each loop lists once, then watches from the list's resourceVersion with bookmarks; a 410 Gone
means the version expired, so it relists and replaces the kind wholesale. Other failures reconnect
with capped exponential backoff.

Gang objects come in several APIs and versions (``cluster/object_sources.py``). Before listing one,
the loop asks the apiserver which of its versions it serves (API discovery) and watches that one;
a kind no version of which is served (no Workload API on this release, no Volcano CRD installed)
counts as synced and empty, and is looked for again later.

No object can stop a loop: one the cache cannot take is logged, counted and skipped, and any
unexpected failure is logged and followed by a relist. While a kind is not listed or its watch is
backing off, the kind is marked out of sync, which is what readiness reports.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..cluster.cache import ClusterCache
from ..cluster.dra.feed import DEVICE_SOURCES, DeviceFeed
from ..cluster.object_sources import GANG_OBJECT_KINDS, GangObjectKind, GangObjectSource
from ..cluster.relist import Rejected
from ..cluster.resources import QuantityError
from ..cluster.scale_ups import KIND as SCALE_UPS
from ..cluster.scale_ups import PATH as SCALE_UP_PATH
from ..metrics import Metrics
from .kube import ApiError, Gone, KubeClient

log = logging.getLogger(__name__)

# A watch read can bring a hundred buffered events, and reading them suspends nothing: the loop
# gives way this often so that kube-scheduler's calls and a gang's bindings are not held behind them.
GIVE_WAY_SECONDS = 0.005

# States reported by Informer.status().
LISTING = "listing"
WATCHING = "watching"
BACKOFF = "backoff"
ABSENT = "absent"  # the API is not served: synced and empty
STOPPED = "stopped"

EVENT_TYPES = frozenset(("ADDED", "MODIFIED", "DELETED", "BOOKMARK"))  # any other is counted as "other"


def drop_unread(obj: dict[str, Any]) -> None:
    """Remove what no record reads and is often most of an object: every kind's managedFields and
    a node's image list. A list holds all its items at once; decoding 5,000 nodes whole left
    106 MiB of the process resident after they were dropped, 57 MiB without managedFields."""
    for part, field in (("metadata", "managedFields"), ("status", "images")):
        value = obj.get(part)
        if isinstance(value, dict):
            value.pop(field, None)


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    path: str
    replace: Callable[[list[dict[str, Any]]], list[Rejected]]
    upsert: Callable[[dict[str, Any]], None]
    delete: Callable[[dict[str, Any]], None]
    discover: GangObjectKind | None = None  # a gang object kind: its version is found at run time
    optional: bool = False  # a 404 means the API is not served: synced and empty (DRA before 1.34)
    listing: Callable[[], None] | None = None  # told just before the full list is asked for


def kinds_for(cache: ClusterCache, gang_kinds: tuple[GangObjectKind, ...] = GANG_OBJECT_KINDS,
              scale_ups: bool = False) -> list[Kind]:
    def unbound(_: Any) -> Any:
        raise RuntimeError("a gang object kind is used only once its served version is known")
    return [
        Kind("nodes", "/api/v1/nodes", cache.replace_nodes, cache.upsert_node,
             lambda o: cache.delete_node((o.get("metadata") or {}).get("name", ""))),
        Kind("pods", "/api/v1/pods", cache.replace_pods, cache.upsert_pod, cache.delete_pod,
             listing=cache.listing_pods),
        *(Kind(g.name, "", unbound, unbound, unbound, discover=g) for g in gang_kinds),
        *device_kinds(cache),
        *([Kind(SCALE_UPS, SCALE_UP_PATH, functools.partial(_replace_scale_ups, cache),
                cache.scale_ups.upsert, cache.scale_ups.delete, optional=True)] if scale_ups else []),
    ]


def _replace_scale_ups(cache: ClusterCache, objs: list[dict[str, Any]]) -> list[Rejected]:
    rejected = cache.scale_ups.replace(objs)
    cache.set_synced(SCALE_UPS, True)
    return rejected


def device_kinds(cache: ClusterCache) -> list[Kind]:
    """The DRA kinds (resource.k8s.io/v1): devices count as capacity (docs/devices.md)."""
    feed = DeviceFeed(cache)
    return [Kind(s.name, s.path, functools.partial(feed.replace, s), functools.partial(feed.upsert, s),
                 functools.partial(feed.delete, s), optional=True) for s in DEVICE_SOURCES]


def served_kind(cache: ClusterCache, source: GangObjectSource) -> Kind:
    """The loop's kind once discovery has found the version the apiserver serves."""
    return Kind(source.name, source.path, lambda objs: cache.replace_gang_objects(source, objs),
                lambda obj: cache.upsert_gang_object(source, obj),
                lambda obj: cache.delete_gang_object(source, obj))


async def paced(events: AsyncIterator[dict[str, Any]],
                every: float = GIVE_WAY_SECONDS) -> AsyncIterator[dict[str, Any]]:
    """The events, with a pass through the event loop whenever ``every`` seconds went by without one."""
    loop = asyncio.get_running_loop()
    since = loop.time()
    async for event in events:
        yield event
        if loop.time() - since >= every:
            await asyncio.sleep(0)
            since = loop.time()


class Informer:
    def __init__(self, client: KubeClient, cache: ClusterCache, metrics: Metrics,
                 backoff_max: float = 30.0, absent_retry: float = 60.0,
                 gang_kinds: tuple[GangObjectKind, ...] = GANG_OBJECT_KINDS, scale_ups: bool = False) -> None:
        self.client = client
        self.gang_kinds = gang_kinds
        self.scale_ups = scale_ups  # watch the ProvisioningRequests Quorum makes (autoscaling on)
        self.served: dict[str, str] = {}  # gang object kind -> the API version being watched
        self.cache = cache
        self.metrics = metrics
        self.backoff_max = backoff_max
        self.absent_retry = absent_retry
        self._tasks: list[asyncio.Task[None]] = []
        self._state: dict[str, str] = {}
        cache.on_clamped = self._clamped

    def start(self) -> None:
        for kind in kinds_for(self.cache, self.gang_kinds, self.scale_ups):
            self._state[kind.name] = LISTING
            self.cache.synced.setdefault(kind.name, False)
            task = asyncio.create_task(self._run(kind), name=f"informer-{kind.name}")
            task.add_done_callback(functools.partial(self._ended, kind.name))
            self._tasks.append(task)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    def status(self) -> dict[str, str]:
        """Per kind: listing, watching, backoff, absent (API not served) or stopped."""
        return dict(self._state)

    def healthy(self) -> bool:
        """Ready to answer: every loop alive, every kind listed and its watch not backing off."""
        return (bool(self._tasks) and not any(task.done() for task in self._tasks)
                and all(self.cache.synced.values()))

    async def _run(self, declared: Kind) -> None:
        delay = 0.5
        version = ""
        kind = declared
        while True:
            try:
                if not version:
                    found = await self._served_kind(declared)
                    if found is None:
                        continue  # not served: looked again after a while
                    kind = found
                    version = await self._list(kind)
                async for event in paced(self.client.watch(kind.path, version,
                                                           on_open=functools.partial(self._opened, kind))):
                    version = self._apply(kind, event) or version
                delay = 0.5  # a watch that ended normally (server timeout): resume from version
            except asyncio.CancelledError:
                raise
            except Gone:
                self.metrics.watch_restarts.labels(kind.name, "gone").inc()
                version = ""  # relist
            except ApiError as exc:
                if _not_served(declared, exc):
                    if not await self._moved(declared, kind):
                        await self._absent(declared)
                    version = ""
                    continue
                delay = await self._backoff(kind, "error", "watch failed", exc, delay)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                delay = await self._backoff(kind, "connection", "watch connection lost", exc, delay)
            except Exception as exc:  # a bug, not an object: say so, then start over from a list
                log.exception("watch loop failed; relisting", extra={"kind": kind.name})
                version = ""
                delay = await self._backoff(kind, "unexpected", "watch loop failed", exc, delay)

    async def _served_kind(self, declared: Kind) -> Kind | None:
        """The kind to list: the served version of a kind that has several (None, after a wait,
        when the apiserver serves none of them), else the kind as declared."""
        if declared.discover is None:
            return declared
        found = await self._discover(declared.discover)
        if found is None:
            await self._absent(declared)
        return found

    async def _moved(self, declared: Kind, gone: Kind) -> bool:
        """Whether a kind whose version stopped being served (an upgrade: v1beta1 dropped beside
        v1) is served in another: then it is listed there at once, and its objects never look
        deleted meanwhile."""
        if declared.discover is None:
            return False
        found = await self._discover(declared.discover)
        return found is not None and found.path != gone.path

    async def _list(self, kind: Kind) -> str:
        """List and replace the kind; objects the cache cannot take are reported, not fatal."""
        self._state[kind.name] = LISTING
        if kind.listing is not None:
            kind.listing()
        items, version = await self.client.list_objects(kind.path, trim=drop_unread)
        for obj, exc in kind.replace(items):
            self._reject(kind.name, obj, exc)
        log.info("listed", extra={"kind": kind.name, "objects": len(items)})
        return version

    def _opened(self, kind: Kind) -> None:
        """The apiserver accepted the watch: the kind is current again."""
        self._state[kind.name] = WATCHING
        self.cache.set_synced(kind.name, True)

    async def _discover(self, kind: GangObjectKind) -> Kind | None:
        """The first of the kind's versions that the apiserver serves, as a loop kind; None when
        none is. A version is served when its discovery document lists the kind's resource."""
        for api_version in kind.versions:
            doc = await self.client.get_json(f"/apis/{api_version}")
            resources = doc.get("resources") if isinstance(doc, dict) else None
            if isinstance(resources, list) and any(
                    isinstance(r, dict) and r.get("name") == kind.plural for r in resources):
                if self.served.get(kind.name) != api_version:
                    log.info("watching gang objects", extra={"kind": kind.name, "api": api_version})
                self.served[kind.name] = api_version
                return served_kind(self.cache, kind.source(api_version))
        self.served.pop(kind.name, None)
        return None

    async def _absent(self, kind: Kind) -> None:
        if self._state.get(kind.name) != ABSENT:
            log.info("objects not served; looking again later",
                     extra={"kind": kind.name, "retry_seconds": self.absent_retry})
        if kind.discover is not None:
            self.cache.replace_gang_objects(kind.discover.source(""), [])
        elif kind.optional:
            kind.replace([])
        self._state[kind.name] = ABSENT
        await asyncio.sleep(self.absent_retry)

    async def _backoff(self, kind: Kind, reason: str, message: str, exc: BaseException,
                       delay: float) -> float:
        """Out of sync until the watch is back; wait, and return the next, longer delay."""
        self._state[kind.name] = BACKOFF
        self.cache.set_synced(kind.name, False)
        self.metrics.watch_restarts.labels(kind.name, reason).inc()
        if reason != "unexpected":
            log.warning(message, extra={"kind": kind.name, "error": str(exc)})
        await asyncio.sleep(delay)
        return min(delay * 2, self.backoff_max)

    def _ended(self, name: str, task: asyncio.Task[None]) -> None:
        """A loop only ends when stopped; whatever the reason, the kind is no longer current."""
        self._state[name] = STOPPED
        self.cache.set_synced(name, False)
        if not task.cancelled() and task.exception() is not None:
            log.error("watch loop ended", extra={"kind": name}, exc_info=task.exception())

    def _apply(self, kind: Kind, event: Any) -> str:
        """Apply one watch event; an object the cache cannot take is skipped, never fatal."""
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict):
            self._reject(kind.name, obj, ValueError("watch event without an object"))
            return ""
        meta = obj.get("metadata")
        version = str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""
        event_type = event.get("type")
        self._counted(kind.name, event_type)
        try:
            if event_type in ("ADDED", "MODIFIED"):
                kind.upsert(obj)
            elif event_type == "DELETED":
                kind.delete(obj)
            # BOOKMARK: only the resourceVersion moves on.
        except Exception as exc:  # any object the cache cannot take
            self._reject(kind.name, obj, exc)
        return version

    def _counted(self, kind: str, event_type: Any) -> None:
        self.metrics.watch_events[(kind, event_type if event_type in EVENT_TYPES else "other")] += 1

    def _reject(self, kind: str, obj: Any, exc: Exception) -> None:
        reason = "invalid-quantity" if isinstance(exc, QuantityError) else "invalid-object"
        self.metrics.objects_rejected.labels(kind, reason).inc()
        name, error = object_name(obj), str(exc)[:300]
        log.warning("%s %s skipped: %s", kind, name, error,
                    extra={"kind": kind, "object": name, "reason": reason, "error": error},
                    exc_info=None if reason == "invalid-quantity" else exc)

    def _clamped(self, kind: str, name: str, resources: list[str]) -> None:
        self.metrics.objects_rejected.labels(kind, "beyond-capacity").inc()
        log.warning("%s %s: %s beyond any capacity (clamped; it can never be placed)", kind, name,
                    ", ".join(resources), extra={"kind": kind, "object": name,
                                                 "reason": "beyond-capacity", "resources": resources})


def object_name(obj: Any) -> str:
    """"namespace/name" (or just the name) of an object of any shape, for logs."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return "<no metadata>"
    name = str(meta.get("name") or "<unnamed>")[:253]
    namespace = str(meta.get("namespace") or "")[:63]
    return f"{namespace}/{name}" if namespace else name


def _not_served(declared: Kind, exc: ApiError) -> bool:
    """A 404 of a kind that may be missing: an optional one, or gang objects of any served version."""
    return exc.status == 404 and (declared.discover is not None or declared.optional)
