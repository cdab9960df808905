"""List + watch loops that keep the cache current (one task per kind).

Each loop lists once, then watches from the list's resourceVersion with bookmarks; a 410 Gone
means the version expired, so it relists and replaces the kind wholesale. Other failures reconnect
with capped exponential backoff. A kind whose API is not served (404, e.g. no PodGroup API on an
older cluster) counts as synced and empty, and is looked for again later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..cluster.cache import ClusterCache
from ..metrics import Metrics
from .kube import ApiError, Gone, KubeClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    path: str
    replace: Callable[[list[dict[str, Any]]], None]
    upsert: Callable[[dict[str, Any]], None]
    delete: Callable[[dict[str, Any]], None]


def kinds_for(cache: ClusterCache) -> list[Kind]:
    return [
        Kind("nodes", "/api/v1/nodes", cache.replace_nodes, cache.upsert_node,
             lambda o: cache.delete_node((o.get("metadata") or {}).get("name", ""))),
        Kind("pods", "/api/v1/pods", cache.replace_pods, cache.upsert_pod, cache.delete_pod),
        Kind("podgroups", "/apis/scheduling.k8s.io/v1beta1/podgroups", cache.replace_podgroups,
             cache.upsert_podgroup, cache.delete_podgroup),
    ]


class Informer:
    def __init__(self, client: KubeClient, cache: ClusterCache, metrics: Metrics,
                 backoff_max: float = 30.0, absent_retry: float = 60.0) -> None:
        self.client = client
        self.cache = cache
        self.metrics = metrics
        self.backoff_max = backoff_max
        self.absent_retry = absent_retry
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for kind in kinds_for(self.cache):
            self._tasks.append(asyncio.create_task(self._run(kind), name=f"informer-{kind.name}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _run(self, kind: Kind) -> None:
        delay = 0.5
        version = ""
        while True:
            try:
                if not version:
                    items, version = await self.client.list_objects(kind.path)
                    kind.replace(items)
                    log.info("listed", extra={"kind": kind.name, "objects": len(items)})
                async for event in self.client.watch(kind.path, version):
                    version = self._apply(kind, event) or version
                delay = 0.5  # a watch that ended normally (server timeout): resume from version
            except asyncio.CancelledError:
                raise
            except Gone:
                self.metrics.watch_restarts.labels(kind.name, "gone").inc()
                version = ""  # relist
            except ApiError as exc:
                if exc.status == 404 and kind.name == "podgroups":
                    if not self.cache.synced[kind.name]:
                        log.info("PodGroup API not served; only annotation gangs are available")
                    kind.replace([])
                    version = ""
                    await asyncio.sleep(self.absent_retry)
                    continue
                self.metrics.watch_restarts.labels(kind.name, "error").inc()
                log.warning("watch failed", extra={"kind": kind.name, "error": str(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                self.metrics.watch_restarts.labels(kind.name, "connection").inc()
                log.warning("watch connection lost", extra={"kind": kind.name, "error": str(exc)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.backoff_max)

    def _apply(self, kind: Kind, event: dict[str, Any]) -> str:
        kind_of_event = event.get("type")
        obj = event.get("object") or {}
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if kind_of_event in ("ADDED", "MODIFIED"):
            kind.upsert(obj)
        elif kind_of_event == "DELETED":
            kind.delete(obj)
        # BOOKMARK: only the resourceVersion moves on.
        return version
