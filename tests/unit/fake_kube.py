"""A recording fake apiserver for ``KubeClient``'s writes, and a client pointed at it.

The fake answers with the status codes (and Status messages) the real apiserver gives; tests look at
what reached it: paths, content types and bodies. Clocks are injected, so aggregation windows and
transition times are exact. The ``kube`` fixture in ``conftest.py`` hands out a ``KubeWorld``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from extender.adapters.events import EventRecorder
from extender.adapters.kube import Credentials, KubeClient
from extender.metrics import Metrics

START = 1_795_456_800.0  # 2026-11-23T18:00:00Z


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any


@dataclass
class FakeApiserver:
    """Records every request; answers ``answers[(method, path)]`` or else 201 to POST, 200 to others."""

    requests: list[Request] = field(default_factory=list)
    answers: dict[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    slow: list[float] = field(default_factory=list)  # seconds to hold each next answer, in turn
    in_flight: int = 0
    most_in_flight: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(Request(request.method, request.path, dict(request.query),
                                     request.content_type, json.loads(raw) if raw else None))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.slow:
                await asyncio.sleep(self.slow.pop(0))
        finally:
            self.in_flight -= 1
        default = (201, "") if request.method == "POST" else (200, "")
        status, message = self.answers.get((request.method, request.path), default)
        if status >= 400:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                   "code": status}
        else:
            doc = {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return web.json_response(doc, status=status)

    def to(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path.startswith(path)]


class Clock:
    """Seconds that move only when a test says so."""

    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class KubeWorld:
    api: FakeApiserver
    client: KubeClient
    clock: Clock
    metrics: Metrics


@asynccontextmanager
async def kube_world() -> AsyncIterator[KubeWorld]:
    """A fake apiserver on a loopback port and a client (with metrics and a fixed clock) using it."""
    api = FakeApiserver()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", api.handle)
    server = TestServer(app)
    await server.start_server()
    clock, metrics = Clock(), Metrics()
    host = str(server.make_url("")).rstrip("/")
    client = KubeClient(Credentials(host, False, {"Accept": "application/json"}), metrics=metrics,
                        clock=clock, wall=clock)
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
