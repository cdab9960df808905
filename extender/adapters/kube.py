"""The one module that talks to the Kubernetes API: list, watch, bind, requeue nudges, and the
gang core's other side effects (evictions, Events; PodGroup conditions and annotations and the
gang-started ConfigMap are written by ``gang_writes.py``, scale-up requests by ``scale_up_writes.py``,
and bindings are sent by ``bindings.py``: parts ``KubeClient`` holds and hands those calls to).

It uses aiohttp on the server's own event loop (the official client is synchronous and would
block it); the ``kubernetes`` package is used only to load credentials from a kubeconfig or the
in-cluster service account, exactly as kubectl would resolve them.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ..cluster.gang_sources import ANNOTATION_REQUEUE
from ..cluster.records import GangHome, PodRecord
from ..gang.core import EvictionFailed
from ..gang.effects import GangCondition, ObjectRef
from ..metrics import Metrics
from .bind_connections import BindConnections, BindTiers
from .bindings import Bindings
from .events import EventRecorder
from .gang_writes import GangWrites, api_message, refusal_causes
from .scale_up_writes import ScaleUpWrites
from .stall import StallWatch
from .token import IN_CLUSTER_TOKEN

log = logging.getLogger(__name__)

_WRITE_TIMEOUT = aiohttp.ClientTimeout(total=30)
_JSON = {"Content-Type": "application/json"}
# Writes in flight at once besides bindings (Events, PodGroup status, nudges, ...). Without a cap
# a burst of gangs opened one connection (one TLS handshake) per write, nearly 200 at once.
_BACKGROUND_WRITES = 16


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Gone(ApiError):
    """410: the resourceVersion is too old; the informer must relist."""


@dataclass(frozen=True, slots=True)
class Credentials:
    host: str
    ssl_context: ssl.SSLContext | bool
    headers: dict[str, str]
    token_file: str | None = None  # in cluster: the ServiceAccount token, which the kubelet rotates


def bearer(token: str) -> str:
    """The Authorization header for ``token``, which the kubeconfig loader hands over bare or with
    a scheme, and the in-cluster loader as ``bearer <token>`` (lower case)."""
    scheme, _, rest = token.partition(" ")
    return f"Bearer {rest.strip() if rest and scheme.lower() == 'bearer' else token.strip()}"


def load_credentials(kubeconfig: str) -> Credentials:
    """Resolve the API endpoint and auth (blocking file reads: call before serving or in a thread)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration)
    else:
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    headers = {"Accept": "application/json", "User-Agent": "quorum-extender"}
    token = configuration.api_key.get("authorization") or configuration.api_key.get("BearerToken")
    if token:
        headers["Authorization"] = bearer(token)
    context: ssl.SSLContext | bool = False
    if configuration.host.startswith("https"):
        if configuration.verify_ssl:
            context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
    token_file = None if kubeconfig else IN_CLUSTER_TOKEN
    return Credentials(configuration.host.rstrip("/"), context, headers, token_file)


def read_json(creds: Credentials, path: str, timeout: float) -> dict[str, Any]:
    """One GET, blocking: for the start (before anything is served) and the command line only.
    An answer that is not a JSON object reads as {}; HTTP errors raise ``urllib.error.HTTPError``."""
    request = urllib.request.Request(f"{creds.host}{path}", headers=creds.headers)
    kwargs: dict[str, Any] = {"timeout": timeout}
    if isinstance(creds.ssl_context, ssl.SSLContext):
        kwargs["context"] = creds.ssl_context
    with urllib.request.urlopen(request, **kwargs) as resp:
        doc = orjson.loads(resp.read())
    return doc if isinstance(doc, dict) else {}


class KubeClient:
    def __init__(self, credentials: Credentials, background_writes: int = _BACKGROUND_WRITES,
                 metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 bind_tiers: BindTiers | None = None) -> None:
        """``background_writes`` caps the writes in flight besides bindings; ``metrics`` (optional)
        counts Events and nudges by result; ``clock`` (intervals) and ``wall`` (timestamps written) are
        injectable for tests, and so are the bindings' connection tiers."""
        self.credentials = credentials
        self.watch_stall_grace = 30.0  # seconds past a watch's own timeout before it counts as dead
        self._session: aiohttp.ClientSession | None = None
        self.binds = BindConnections(credentials.ssl_context, self._new_session, bind_tiers or BindTiers())
        self.bindings = Bindings(self.binds, credentials.host)
        self._write_limit = asyncio.Semaphore(background_writes)
        on_result = None if metrics is None else (lambda result: metrics.events.labels(result).inc())
        self._count_nudge: Callable[[str], None] = (lambda result: None) if metrics is None else (
            lambda result: metrics.nudges.labels(result).inc())
        self.events = EventRecorder(self.write, clock=clock, wall=wall, on_result=on_result)
        self.gang_writes = GangWrites(self.write, wall)
        self.scale_up_writes = ScaleUpWrites(self.write)

    @property
    def session(self) -> aiohttp.ClientSession:
        """Lists, watches and every write but bindings."""
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self.credentials.ssl_context, limit=200)
            self._session = self._new_session(connector)
        return self._session

    def _new_session(self, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(base_url=None, connector=connector, headers=self.credentials.headers,
                                     json_serialize=lambda o: orjson.dumps(o).decode())

    def set_token(self, token: str) -> None:
        """Send ``token`` from now on (a rotated ServiceAccount token); open watches keep theirs."""
        self.credentials.headers["Authorization"] = f"Bearer {token}"
        for session in [self._session, *self.binds.sessions()]:
            if session is not None:
                session.headers["Authorization"] = f"Bearer {token}"

    async def close(self) -> None:
        await self.events.close()  # before the session: its last writes need it
        if self._session is not None:
            await self._session.close()
        self._session = None
        await self.binds.close()

    def _url(self, path: str) -> str:
        return self.credentials.host + path

    # ---------------------------------------------------------------- list / watch
    async def list_objects(self, path: str, trim: Callable[[dict[str, Any]], None],
                           ) -> tuple[list[dict[str, Any]], str]:
        """List every object (paged), returning items and the list's resourceVersion; ``trim`` is
        applied to each item as its page arrives (the items are held until the list is whole)."""
        items: list[dict[str, Any]] = []
        params: dict[str, str] = {"limit": "500"}
        while True:
            async with self.session.get(self._url(path), params=params) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise _error(resp.status, body)
            page = (doc := orjson.loads(body)).get("items") or []
            for obj in page:
                trim(obj)
            items.extend(page)
            meta = doc.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            params = {"limit": "500", "continue": meta["continue"]}

    async def get_json(self, path: str) -> dict[str, Any] | None:
        """One object (a discovery document, a Topology); None when the server has none (404)."""
        async with self.session.get(self._url(path)) as resp:
            body = await resp.read()
            if resp.status == 404:
                return None
            if resp.status != 200:
                raise _error(resp.status, body)
        doc = orjson.loads(body)
        return doc if isinstance(doc, dict) else None

    async def watch(self, path: str, resource_version: str, timeout_seconds: int = 300,
                    on_open: Callable[[], None] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events; raises Gone on 410 so the caller relists.

        ``on_open`` runs once the apiserver has accepted the watch, before any event: a quiet
        watch may yield nothing for minutes, yet it is up.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        # No sock_read: a watch quiet for longer than the apiserver's own timeout is ended by a
        # StallWatch, which costs the reader a float per line instead of a timer per chunk.
        limit = timeout_seconds + self.watch_stall_grace
        async with asyncio.timeout(limit):  # the headers
            response = await self.session.get(self._url(path), params=params,
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
        async with response as resp:
            if resp.status != 200:
                raise _error(resp.status, await resp.read())
            if on_open is not None:
                on_open()
            loop = asyncio.get_running_loop()
            stall = StallWatch(resp, limit, loop)
            try:
                async for event in _events(resp, stall, loop):
                    yield event
            except aiohttp.ClientError:
                if not stall.stalled:
                    raise  # a stalled read ends in whatever closing it raised: reported below
            finally:
                stall.stop()
            if stall.stalled:
                raise TimeoutError(f"watch of {path}: nothing read for {stall.limit:.0f} s")

    # ---------------------------------------------------------------- side effects
    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Bind on the bindings' own connections, sent again when turned away (bindings.py)."""
        await self.bindings.bind_pod(namespace, name, uid, node)

    async def requeue_pods(self, pods: list[PodRecord], reason: str,
                           wanted: Callable[[PodRecord], bool]) -> None:
        """Touch an annotation on each pending pod so kube-scheduler re-queues it now.

        The scheduler only retries unschedulable pods on cluster events; a reservation being made or
        a backoff ending is invisible to it, so a pod update is the event we give it. Each pod is
        asked ``wanted`` once a write slot is free: a pod bound while its nudge waited is skipped.
        """
        stamp = f"{time.time():.3f}"
        patch = orjson.dumps({"metadata": {"annotations": {ANNOTATION_REQUEUE: stamp}}})

        async def one(pod: PodRecord) -> None:
            async with self._write_limit:
                if not wanted(pod):
                    self._count_nudge("skipped")
                    return
                self._count_nudge("sent")
                path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
                try:
                    async with self.session.patch(
                        self._url(path), data=patch,
                        headers={"Content-Type": "application/merge-patch+json"},
                    ) as resp:
                        if resp.status != 200:
                            log.debug("requeue patch failed", extra={"pod": pod.key, "status": resp.status})
                except aiohttp.ClientError as exc:
                    log.debug("requeue patch failed", extra={"pod": pod.key, "error": str(exc)})

        log.debug("requeue", extra={"pods": len(pods), "reason": reason})
        await asyncio.gather(*(one(p) for p in pods))

    async def write(self, method: str, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
        """One write request: its status and body. Transport errors raise (aiohttp.ClientError,
        TimeoutError); what a status means is the caller's business."""
        async with self._write_limit, self.session.request(
                method, self._url(path), data=body, timeout=_WRITE_TIMEOUT,
                headers={"Content-Type": content_type}) as resp:
            return resp.status, await resp.read()

    async def evict_pod(self, namespace: str, name: str, uid: str, reason: str,
                        grace_seconds: int | None = None, dry_run: bool = False) -> None:
        """Evict through the Eviction API, so PodDisruptionBudgets are honoured.

        The uid precondition makes sure a pod recreated under the same name is never the one
        evicted; the apiserver's conflict about it means the pod meant is gone, which is success.
        ``grace_seconds`` overrides the pod's termination grace period (0: its node is gone).
        ``dry_run`` asks whether the eviction would be allowed and evicts nothing: a gang is evicted
        only when every member may go.
        """
        pod = f"{namespace}/{name}"
        options: dict[str, Any] = {}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if dry_run:
            options["dryRun"] = ["All"]
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if options:
            body["deleteOptions"] = options
        verb = "checking eviction of" if dry_run else "evicting"
        log.info(f"{verb} pod", extra={"pod": pod, "reason": reason})
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        try:
            status, text = await self.write("POST", path, orjson.dumps(body), "application/json")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise EvictionFailed(f"{verb} {pod} failed: {exc}") from exc
        if status in (200, 201, 404):  # 404: gone already
            return
        message = api_message(status, text)
        if status == 409 and uid and "precondition" in message.lower() and "uid" in message.lower():
            log.info("pod to evict was already replaced", extra={"pod": pod, "uid": uid})
            return
        if status == 429:
            causes = refusal_causes(text)
            raise EvictionFailed(f"{verb} {pod} refused, a PodDisruptionBudget does not allow it now: "
                                 f"{message}" + (f" ({causes})" if causes else ""))
        raise EvictionFailed(f"{verb} {pod} failed: {message}")

    def record_event(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        """Queue an Event; aggregated and rate limited by ``self.events`` (never blocks or raises)."""
        self.events.record(regarding, type_, reason, action, note)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Merge-patch bookkeeping annotations on a pod (a gang declared by annotations keeps its
        requeue count on its members); True when written, a pod that is gone is no error."""
        body = orjson.dumps({"metadata": {"annotations": annotations}})
        try:
            status, text = await self.write("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", body,
                                            "application/merge-patch+json")
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("writing pod annotations failed",
                        extra={"pod": f"{namespace}/{name}", "error": str(exc)})
            return False
        if status not in (200, 404):
            log.warning("writing pod annotations failed",
                        extra={"pod": f"{namespace}/{name}", "error": api_message(status, text)})
        return status == 200

    # ---------------------------------------------------------------- writes of the two parts
    async def set_gang_conditions(self, home: GangHome, conditions: list[GangCondition]) -> None:
        await self.gang_writes.set_gang_conditions(home, conditions)

    async def annotate_gang(self, home: GangHome, annotations: dict[str, str | None]) -> bool:
        return await self.gang_writes.annotate_gang(home, annotations)

    async def write_started_configmap(self, namespace: str, name: str, owner: GangHome | None,
                                      data: dict[str, str]) -> bool:
        return await self.gang_writes.write_started_configmap(namespace, name, owner, data)

    async def delete_started_configmap(self, namespace: str, name: str) -> bool:
        return await self.gang_writes.delete_started_configmap(namespace, name)

    async def create_scale_up(self, namespace: str, name: str, gang: str, node_selector: dict[str, str],
                              requests: dict[str, int], count: int, class_name: str,
                              together: str = "") -> bool:
        return await self.scale_up_writes.create_scale_up(namespace, name, gang, node_selector, requests,
                                                          count, class_name, together)

    async def delete_scale_up(self, namespace: str, name: str) -> bool:
        return await self.scale_up_writes.delete_scale_up(namespace, name)


async def _events(resp: aiohttp.ClientResponse, stall: StallWatch,
                  loop: asyncio.AbstractEventLoop) -> AsyncIterator[dict[str, Any]]:
    """The watch response's events, one JSON document a line; an ERROR event raises."""
    while True:
        line = await resp.content.readline()
        stall.last_read = loop.time()
        if not line:
            return
        if not line.strip():
            continue
        event = orjson.loads(line)
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            raise _error(int(status.get("code") or 500), orjson.dumps(status))
        yield event


def _error(status: int, body: bytes) -> ApiError:
    message = api_message(status, body)
    if status == 410:
        return Gone(status, message)
    return ApiError(status, message)
