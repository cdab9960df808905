"""Fixtures shared by the unit test modules (builders and worlds in ``fixtures.py``, fakes in
``fake_apiserver.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

import pytest
import uvloop

from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import CacheEvent

from .fixtures import LEVEL_LABELS, KubeWorld, kube_world, topology_nodes
from .server_stack import Stack, StackFactory, stack_factories

EVENT_LOOPS: Mapping[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
STANDARD_LOOP = {"asyncio": asyncio.new_event_loop}


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> \
        Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Tests marked ``event_loops`` run on both loops Quorum can run on: the standard one and uvloop
    (``QUORUM_EVENT_LOOP=uvloop``). Every other test keeps the standard loop."""
    return EVENT_LOOPS if item.get_closest_marker("event_loops") else STANDARD_LOOP


@pytest.fixture
def cache() -> ClusterCache:
    """A cache holding the small topology of ``topology_nodes()``."""
    c = ClusterCache(LEVEL_LABELS)
    c.replace_nodes(topology_nodes())
    return c


@pytest.fixture
def events(cache: ClusterCache) -> list[CacheEvent]:
    """Every event the ``cache`` fixture emits, in order."""
    seen: list[CacheEvent] = []
    cache.listeners.append(seen.append)
    return seen


@pytest.fixture
async def make_stack() -> AsyncIterator[StackFactory]:
    """Builds servers over real HTTP; all are closed after the test."""
    async for factory in stack_factories():
        yield factory


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack()


@pytest.fixture
async def kube() -> AsyncIterator[KubeWorld]:
    """A ``KubeClient`` writing to a recording fake apiserver (see ``fake_apiserver``)."""
    async with kube_world() as world:
        yield world
