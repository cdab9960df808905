"""Quorum in-process as production wires it, driven only from the outside.

The black-box regression tests run against this version of Quorum and against versions from before
the gang core's redesign: ``hack/regressions-on-old-code.sh`` copies this module (with ``payloads``
and ``fake_apiserver``) into such a tree, since ``extender.cli.build`` and the Kubernetes client's
methods are the same in both. So nothing here reads Quorum's internals. The app is built by
``extender.cli.build`` (the same wiring as the process, readiness included) with the recording
``FakeApiserver`` in place of the Kubernetes client.
Tests talk to it over HTTP, feed the watches, and look at what reached the client (bindings,
requeue nudges) and at the logs.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import time
import traceback
import tracemalloc
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from unittest import mock

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from extender import cli
from extender.adapters.kube import Credentials
from extender.config import Config, GangTimings

from .fake_apiserver import NODES, PODGROUPS, PODS, FakeApiserver
from .payloads import (
    HOST,
    binding_args,
    bound,
    extender_args,
    gang_pod,
    load,
    make_node,
    make_pod,
    make_podgroup,
)

__all__ = [
    "HOST",
    "NODES",
    "PODGROUPS",
    "PODS",
    "FakeApiserver",
    "Quorum",
    "binding_args",
    "bound",
    "eventually",
    "extender_args",
    "gang_pod",
    "load",
    "make_node",
    "make_pod",
    "make_podgroup",
    "retained_bytes",
    "run_isolated",
    "running_quorum",
    "small_cluster",
]

# How long the harness waits for something that takes milliseconds: only a hang detector.
PATIENCE_SECONDS = 2.0

T = TypeVar("T")


async def eventually(condition: Callable[[], bool], what: str, within: float = PATIENCE_SECONDS) -> None:
    """Wait until ``condition`` holds; fail naming ``what`` if it does not within ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g}s: {what}")
        await asyncio.sleep(0.005)


@dataclass
class Quorum:
    """A running app: HTTP verbs and probes, plus the fake Kubernetes client behind it."""

    client: TestClient[Any, Any]
    api: FakeApiserver

    async def post(self, verb: str, body: bytes) -> tuple[int, Any]:
        # Through the session: TestClient would keep every response (and its body) until closed.
        async with self.client.session.post(self.client.make_url(verb), data=body,
                                            headers={"Content-Type": "application/json"}) as resp:
            text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

    async def filter(self, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
        """A /filter call that must answer 200; its ExtenderFilterResult."""
        status, doc = await self.post("/filter", extender_args(pod, names=names))
        assert status == 200, (status, doc)
        assert isinstance(doc, dict)
        return doc

    async def bind(self, pod: dict[str, Any], node: str) -> str:
        """A /bind call that must answer 200; its Error field."""
        meta = pod["metadata"]
        body = binding_args(meta["name"], meta["namespace"], meta["uid"], node)
        status, doc = await self.post("/bind", body)
        assert status == 200, (status, doc)
        return str(doc["Error"])

    async def readyz(self) -> int:
        return (await self.client.get("/readyz")).status

    async def until_ready(self) -> None:
        """Wait for /readyz to answer 200; fail if it does not within the harness's patience."""
        deadline = time.monotonic() + PATIENCE_SECONDS
        status = await self.readyz()
        while status != 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            status = await self.readyz()
        assert status == 200, f"/readyz answered {status} for {PATIENCE_SECONDS:g}s"

    async def debug_gangs(self) -> dict[str, Any]:
        resp = await self.client.get("/debug/gangs")
        assert resp.status == 200
        doc: dict[str, Any] = json.loads(await resp.read())
        return doc

    async def gang(self, key: str) -> dict[str, Any] | None:
        """The /debug/gangs entry of one gang ("namespace/name"), if it has one."""
        return next((g for g in (await self.debug_gangs())["gangs"] if g["gang"] == key), None)

    async def settle(self) -> None:
        """Wait until every watch took its events and what they set off has run."""
        await eventually(self.api.drained, "the watches take the events given to them")
        for _ in range(5):
            await asyncio.sleep(0)


def small_cluster(blocks: int = 2, racks: int = 2, per_rack: int = 2) -> list[dict[str, Any]]:
    """Nodes ``b<i>-r<j>-n<k>`` of 8 GPUs each, labelled with their block, rack and host."""
    return [make_node(f"b{b}-r{r}-n{n}", f"b{b}", f"b{b}-r{r}")
            for b in range(blocks) for r in range(racks) for n in range(per_rack)]


class _ProductionServer(TestServer):
    """A loopback server with the options ``web.run_app`` uses in ``extender.cli``.

    ``TestServer`` turns handler cancellation on; the process runs with aiohttp's default (off),
    so a handler whose client went away keeps running and reads a reset connection.
    """

    async def _make_runner(self, **kwargs: Any) -> web.AppRunner:
        return web.AppRunner(self.app, **(kwargs | {"handler_cancellation": False, "access_log": None}))


def build(api: FakeApiserver, config: Config) -> web.Application:
    """The app exactly as ``extender.cli`` builds it, with the fake Kubernetes client."""
    # No token file: the fake client is never given a rotated token.
    credentials = Credentials("http://127.0.0.1", False, {})
    with mock.patch.object(cli, "load_credentials", lambda _path: credentials), \
            mock.patch.object(cli, "KubeClient", lambda *_args, **_kwargs: api):
        return cli.build(config)


def config(bind_timeout: float = 30.0) -> Config:
    return replace(Config(), gang=GangTimings(bind_timeout_seconds=bind_timeout))


@asynccontextmanager
async def running_quorum(api: FakeApiserver | None = None, *, nodes: list[dict[str, Any]] | None = None,
                         bind_timeout: float = 30.0, wait_ready: bool = True) -> AsyncIterator[Quorum]:
    """Quorum on a loopback port, these nodes listed (default: ``small_cluster()``), ready."""
    api = api or FakeApiserver()
    if nodes is not None or not api.objects[NODES]:
        api.objects[NODES] = small_cluster() if nodes is None else nodes
    client: TestClient[Any, Any] = TestClient(_ProductionServer(build(api, config(bind_timeout))))
    await client.start_server()
    try:
        quorum = Quorum(client, api)
        if wait_ready:
            await quorum.until_ready()
        yield quorum
    finally:
        await client.close()


async def retained_bytes(work: Coroutine[Any, Any, None]) -> int:
    """Bytes still allocated (by anyone in this process) after ``work`` than before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await work
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- isolation


def _child(scenario: Callable[[], Coroutine[Any, Any, Any]], pipe: Any) -> None:
    try:
        pipe.send(("ok", asyncio.run(scenario())))
    except AssertionError:
        pipe.send(("assertion", traceback.format_exc()))
    except BaseException:
        pipe.send(("error", traceback.format_exc()))


def run_isolated(scenario: Callable[[], Coroutine[Any, Any, T]], within: float) -> T:
    """Run ``scenario`` in a forked process; fail if it has not finished within ``within`` seconds.

    A request that keeps the event loop (and the GIL) busy in C code cannot be interrupted from
    inside the process, so a hang is only detectable, and stoppable, from another one.
    """
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(scenario, sender), daemon=True)
    process.start()
    sender.close()
    try:
        if not receiver.poll(within):
            raise AssertionError(f"no result within {within:g}s: Quorum's event loop is blocked")
        try:
            outcome, value = receiver.recv()
        except EOFError:  # killed by the OS (out of memory) or crashed: Quorum's process is gone
            process.join()
            raise AssertionError(f"the scenario's process died (exit code {process.exitcode})") from None
    finally:
        process.kill()
        process.join()
    if outcome == "assertion":
        raise AssertionError(f"in the isolated scenario:\n{value}")
    if outcome == "error":
        raise RuntimeError(f"in the isolated scenario:\n{value}")
    result: T = value
    return result
