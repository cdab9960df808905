"""The in-process server the server tests talk to over real HTTP (aiohttp's test server)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient, TestServer

from extender.adapters.server import build_app
from extender.cluster.cache import ClusterCache
from extender.config import Config
from extender.gang.coordinator import Coordinator
from extender.metrics import Metrics

from .fake_apiserver import FakeActions
from .fixtures import LEVEL_LABELS, topology_nodes


@dataclass
class Stack:
    client: TestClient[Any, Any]
    cache: ClusterCache
    coordinator: Coordinator
    metrics: Metrics
    actions: FakeActions
    ready: dict[str, bool]

    async def post(self, path: str, data: bytes) -> ClientResponse:
        return await self.client.post(path, data=data, headers={"Content-Type": "application/json"})

    async def post_json(self, path: str, data: bytes) -> tuple[int, Any]:
        resp = await self.post(path, data)
        return resp.status, json.loads(await resp.read())


StackFactory = Callable[..., Awaitable[Stack]]


class _Server(TestServer):
    """A test server whose runner takes options (lingering_time, handler_cancellation) that
    ``TestServer`` either fixes or does not pass on."""

    def __init__(self, app: web.Application, options: dict[str, Any]) -> None:
        super().__init__(app)
        self._options = options

    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        return web.AppRunner(self.app, **(kwargs | self._options))


async def stack_factories() -> AsyncIterator[StackFactory]:
    clients: list[TestClient[Any, Any]] = []

    async def factory(max_request_bytes: int = 1 << 20, nodes: list[dict[str, Any]] | None = None,
                      body_timeout: float = 10.0, **server_options: Any) -> Stack:
        cache = ClusterCache(LEVEL_LABELS)
        cache.replace_nodes(topology_nodes() if nodes is None else nodes)
        metrics = Metrics()
        actions = FakeActions()
        coordinator = Coordinator(Config(), cache, actions, metrics)
        ready = {"value": False}
        app = build_app(coordinator, cache, metrics, lambda: ready["value"], max_request_bytes,
                        body_timeout=body_timeout)
        client = TestClient(_Server(app, server_options))
        await client.start_server()
        clients.append(client)
        return Stack(client, cache, coordinator, metrics, actions, ready)

    yield factory
    for client in clients:
        await client.close()
