"""The cluster benchmark's own apiserver client: asyncio, TLS client certificate, bulk writes.

The benchmark creates and deletes thousands of pods and watches every bind; the
synchronous kubernetes client would be the bottleneck (and its CPU would be charged to the
machine the systems under test share), so this small client speaks HTTP directly.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

CLUSTER_DIR = Path(__file__).resolve().parent.parent / ".cache" / "cluster"
APISERVER = "https://127.0.0.1:16443"


class Apiserver:
    """Admin access to the local cluster (hack/cluster-up.sh's certificates)."""

    def __init__(self, base: str = APISERVER, cluster_dir: Path = CLUSTER_DIR, concurrency: int = 48) -> None:
        pki = cluster_dir / "pki"
        self.ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.base = base
        self.concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Apiserver:
        connector = aiohttp.TCPConnector(ssl=self.ssl, limit=self.concurrency)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use Apiserver as an async context manager"
        return self._session

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      ok: tuple[int, ...] = (200, 201, 202), attempts: int = 5) -> Any:
        """One call, retried on 429/5xx and connection errors (the apiserver is busy, not wrong)."""
        data = None if body is None else orjson.dumps(body)
        for attempt in range(attempts):
            try:
                async with self.session.request(method, self.base + path, data=data,
                                                headers={"Content-Type": content_type}) as resp:
                    raw = await resp.read()
                    if resp.status in ok:
                        return orjson.loads(raw) if raw else None
                    if resp.status not in (429, 500, 502, 503, 504) or attempt == attempts - 1:
                        raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {raw[:300]!r}")
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
                # A body cut short too: a busy apiserver may drop a long answer (a deletecollection
                # of thousands of pods) part-way; the calls made here may be repeated.
                if attempt == attempts - 1:
                    raise
            await asyncio.sleep(0.2 * 2 ** attempt)
        raise AssertionError("unreachable")

    async def get(self, path: str) -> Any:
        return await self.request("GET", path)

    async def create(self, path: str, obj: dict[str, Any]) -> Any:
        return await self.request("POST", path, obj)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return await self.request("DELETE", path, body, ok=(200, 202, 404))

    async def each(self, items: Iterable[Any], call: Callable[[Any], Awaitable[Any]],
                   width: int | None = None) -> float:
        """Run ``call`` on every item, ``width`` at a time; the seconds it took."""
        started = time.monotonic()
        gate = asyncio.Semaphore(width or self.concurrency)

        async def one(item: Any) -> None:
            async with gate:
                await call(item)

        await asyncio.gather(*(one(i) for i in items))
        return time.monotonic() - started


class BindWatch:
    """Every pod of a namespace as the watch delivers it: when each got its node (receive time,
    monotonic), when each was first seen running, and when each reached a terminal phase. The
    clock starts when the watch does."""

    def __init__(self, api: Apiserver, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.bound_at: dict[str, float] = {}
        self.node_of: dict[str, str] = {}
        self.running_at: dict[str, float] = {}
        self.finished_at: dict[str, float] = {}
        self.labels: dict[str, dict[str, str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self.changed = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), 30)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        version = ""
        while True:
            if not version:
                listed = await self.api.get(f"/api/v1/namespaces/{self.namespace}/pods")
                for pod in listed["items"]:
                    self._see(pod)
                version = listed["metadata"]["resourceVersion"]
                self._ready.set()
            path = (f"{self.api.base}/api/v1/namespaces/{self.namespace}/pods?watch=1"
                    f"&resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds=600")
            try:
                async with self.api.session.get(path) as resp:
                    if resp.status != 200:
                        version = ""
                        continue
                    async for line in resp.content:
                        event = orjson.loads(line)
                        if event["type"] == "ERROR":
                            version = ""  # expired: list again
                            break
                        version = event["object"]["metadata"].get("resourceVersion", version)
                        if event["type"] != "BOOKMARK":
                            self._see(event["object"])
            except aiohttp.ClientPayloadError:
                continue

    def _see(self, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        self.labels.setdefault(name, pod["metadata"].get("labels") or {})
        node = pod["spec"].get("nodeName")
        if node and name not in self.bound_at:
            self.bound_at[name], self.node_of[name] = now, node
            self.changed.set()
        phase = pod.get("status", {}).get("phase")
        if phase == "Running" and name not in self.running_at:
            self.running_at[name] = now
        if phase in ("Succeeded", "Failed") and name not in self.finished_at:
            self.finished_at[name] = now
            self.changed.set()

    async def until(self, done: Callable[[], bool], seconds: float) -> bool:
        """Wait until ``done()`` holds (checked on every change); whether it did in time."""
        deadline = time.monotonic() + seconds
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass
        return True
