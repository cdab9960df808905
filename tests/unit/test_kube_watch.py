"""``KubeClient.watch`` against a small HTTP server that streams watch lines: events are read, and a
watch whose connection goes silent is ended (``StallWatch``) while a slow but live one is not."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from extender.adapters.kube import Credentials, KubeClient
from extender.adapters.stall import StallWatch

PODS = "/api/v1/pods"
pytestmark = pytest.mark.event_loops

Serve = Callable[..., Awaitable[KubeClient]]


def _line(name: str) -> bytes:
    return json.dumps({"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": "1"}}}
                      ).encode() + b"\n"


async def _client(lines: list[tuple[float, bytes]], then_hang: bool
                  ) -> tuple[TestServer, KubeClient]:
    """A server whose watch writes each line after its delay, then hangs up or (``then_hang``)
    keeps the connection open and says nothing."""

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for delay, line in lines:
            await asyncio.sleep(delay)
            await response.write(line)
        if then_hang:
            await asyncio.sleep(30)
        return response

    app = web.Application()
    app.router.add_get(PODS, watch)
    server = TestServer(app)
    await server.start_server()
    client = KubeClient(Credentials(str(server.make_url("")).rstrip("/"), False, {}))
    return server, client


async def _names(client: KubeClient) -> list[str]:
    return [event["object"]["metadata"]["name"] async for event in client.watch(PODS, "1", timeout_seconds=0)]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    opened: list[tuple[TestServer, KubeClient]] = []

    async def start(lines: list[tuple[float, bytes]], then_hang: bool = False) -> KubeClient:
        server, client = await _client(lines, then_hang)
        opened.append((server, client))
        return client

    yield start
    for server, client in opened:
        await client.close()
        await server.close()


async def test_a_watch_that_goes_silent_is_ended_as_a_timeout(serve: Serve) -> None:
    client = await serve([(0, _line("a"))], then_hang=True)
    client.watch_stall_grace = 0.3
    got: list[str] = []
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="nothing read for"):
        async for event in client.watch(PODS, "1", timeout_seconds=0):
            got.append(event["object"]["metadata"]["name"])
    assert got == ["a"]
    assert time.monotonic() - started < 5


async def test_a_slow_watch_that_keeps_talking_is_not_cut(serve: Serve) -> None:
    """Lines 0.15 s apart over 0.9 s, with 0.4 s allowed between two: every line is read and the
    watch ends when the server ends it."""
    client = await serve([(0.15, _line(f"p{i}")) for i in range(6)])
    client.watch_stall_grace = 0.4
    assert await _names(client) == [f"p{i}" for i in range(6)]


async def test_the_watchdog_wakes_once_per_limit_and_closes_only_after_a_quiet_limit() -> None:
    class Response:
        closed = 0

        def close(self) -> None:
            self.closed += 1

    loop = asyncio.get_running_loop()
    response = Response()
    stall = StallWatch(response, 0.2, loop)
    await asyncio.sleep(0.12)
    stall.last_read = loop.time()  # a line at 0.12 s: the limit runs from there
    await asyncio.sleep(0.15)
    assert (response.closed, stall.stalled) == (0, False)
    await asyncio.sleep(0.15)
    assert (response.closed, stall.stalled) == (1, True)
    stall.stop()
