"""Bindings: the one request that decides where a pod runs, on connections of its own.

A binding the apiserver turns away (HTTP 429: API Priority and Fairness found no seat for it in
time, or a max-in-flight limit was reached) was not made, and is sent again after the wait its
``Retry-After`` asks for, as client-go does for kube-scheduler's default binder. Failing it instead
would leave the member's gang bound but for that member while kube-scheduler tried it again.
Any other failure is the caller's to handle (``BindFailed``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import aiohttp
import orjson

from ..gang.coordinator import BindFailed
from .bind_connections import BindConnections
from .gang_writes import api_message

log = logging.getLogger(__name__)

_JSON = {"Content-Type": "application/json"}
# A binding turned away is sent this many times in all, each after the wait its Retry-After asks
# for (at most RETRY_AFTER_MAX_SECONDS): at most 16 s in all, well inside kube-scheduler's wait for
# the bind call it answers (the extender's httpTimeout).
BIND_ATTEMPTS = 5
RETRY_AFTER_MAX_SECONDS = 4.0


def retry_after_seconds(header: str | None) -> float:
    """The wait a 429's Retry-After asks for (whole seconds, as the apiserver sends it); 1 s when it
    is missing or not a number, and never more than ``RETRY_AFTER_MAX_SECONDS``."""
    try:
        seconds = float(header) if header is not None else 1.0
    except ValueError:
        return 1.0
    return 1.0 if math.isnan(seconds) else min(max(seconds, 0.0), RETRY_AFTER_MAX_SECONDS)


def said(exc: BaseException) -> str:
    """What an exception says, or its name when it says nothing (aiohttp's timeouts)."""
    return str(exc) or type(exc).__name__


class Bindings:
    """Binds pods through ``connections``, which keep bindings off the connections of every other
    request (bind_connections.py)."""

    def __init__(self, connections: BindConnections, host: str) -> None:
        self.connections = connections
        self._host = host

    def _url(self, path: str) -> str:
        return self._host + path

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pods/binding subresource; already bound to the same node counts as success."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid:
            body["metadata"]["uid"] = uid
        path, data = f"/api/v1/namespaces/{namespace}/pods/{name}/binding", orjson.dumps(body)
        for attempt in range(1, BIND_ATTEMPTS + 1):
            status, text, retry_after = await self._post(path, data, f"{namespace}/{name}", node)
            if status != 429 or attempt == BIND_ATTEMPTS:
                break
            # Turned away, not refused: the binding was not made (the module's docstring says why).
            delay = retry_after_seconds(retry_after)
            log.info("binding turned away by the apiserver, sent again", extra={
                "pod": f"{namespace}/{name}", "attempt": attempt, "retry_after": delay})
            await asyncio.sleep(delay)
        if status in (200, 201):
            return
        if status == 404:  # the apiserver's message may be empty: say what it means
            raise BindFailed(f"binding {namespace}/{name} to {node} failed: pod {namespace}/{name} not found "
                             "(HTTP 404)")
        if status == 429:
            raise BindFailed(f"binding {namespace}/{name} to {node} failed: {api_message(status, text)} "
                             f"(turned away {BIND_ATTEMPTS} times)")
        if status == 409:
            # Bound already (a retried call after a late answer): success only if to this node.
            try:
                current = await self._get_pod(namespace, name)
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
                raise BindFailed(f"binding {namespace}/{name} to {node}: conflict, and reading the pod "
                                 f"back failed: {said(exc)}") from exc
            if current is not None and (current.get("spec") or {}).get("nodeName") == node:
                return
        raise BindFailed(f"binding {namespace}/{name} to {node} failed: {api_message(status, text)}")

    async def _post(self, path: str, data: bytes, pod: str, node: str) -> tuple[int, bytes, str | None]:
        """One POST of a Binding: its status, its body unless it succeeded, and its Retry-After."""
        try:
            async with self.connections.lease() as session, session.post(
                    self._url(path), data=data, headers=_JSON) as resp:
                if resp.status in (200, 201):
                    return resp.status, b"", None
                return resp.status, await resp.read(), resp.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BindFailed(f"binding {pod} to {node} failed: {said(exc)}") from exc

    async def _get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        async with self.connections.lease() as session, session.get(
                self._url(f"/api/v1/namespaces/{namespace}/pods/{name}")) as resp:
            if resp.status != 200:
                return None
            result: dict[str, Any] = orjson.loads(await resp.read())
            return result
