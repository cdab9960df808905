"""Fixtures shared by the unit test modules (builders and worlds in ``fixtures.py``, fakes in
``fake_apiserver.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from extender.cluster.cache import ClusterCache
from extender.cluster.cache_events import CacheEvent

from .fixtures import LEVEL_LABELS, KubeWorld, kube_world, topology_nodes
from .server_stack import Stack, StackFactory, stack_factories


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
