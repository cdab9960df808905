"""Hostile DRA objects: whatever a ResourceSlice, claim, template or class holds, the cache takes
what makes sense of it without raising half-way, never counts a negative or foreign amount, and
Quorum keeps answering with its invariants intact.

Valid objects are mutated at a random path (a value replaced by any JSON value, or removed) and fed
through the informer's entry points between filter calls of a DRA gang.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cluster.dra.feed import DEVICE_SOURCES, DeviceFeed

from .dra_objects import claim, device_class, exactly, resource_slice, template, with_template
from .fixtures import World, gang_pod
from .json_values import json_values, paths

pytestmark = pytest.mark.fuzz

SOURCES = {s.name: s for s in DEVICE_SOURCES}
_json = json_values(max_leaves=10)
_FIRST = {"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.example.com", "count": 2}]}
BASES = {
    "deviceclasses": device_class(),
    "resourceslices": resource_slice("b0-r0-n0", 4),
    "resourceclaimtemplates": template("t8", exactly(8), exactly(1, selectors=('device.driver != ""',)),
                                       _FIRST),
    "resourceclaims": claim("c", exactly(2), owner_uid="uid-g0", allocated_on="b0-r0-n0", devices=range(2)),
}


@st.composite
def hostile(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(sorted(BASES)))
    obj = copy.deepcopy(BASES[kind])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(obj)))
        parent = obj
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = draw(_json)
        if not isinstance(obj, dict):
            break
    return kind, obj


EXAMPLES = int(os.environ.get("QUORUM_FUZZ_EXAMPLES", "300"))


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects=st.lists(hostile(), min_size=1, max_size=6))
async def test_hostile_device_objects_never_break_the_cache(
        objects: list[tuple[str, dict[str, Any]]]) -> None:
    world = World(racks=1, nodes_per_rack=2)
    feed = DeviceFeed(world.cache)
    for kind, obj in BASES.items():
        feed.upsert(SOURCES[kind], copy.deepcopy(obj))
    names = []
    for i in range(2):
        pod = with_template(gang_pod(f"g{i}", gang="g", min_count=2, gpus=0), "t8")
        world.add(pod)
        names.append(f"g{i}")
    for kind, obj in objects:
        feed.upsert(SOURCES[kind], obj)  # taken as far as it makes sense: never half applied
        for node in world.names:
            free, _ = world.cache.free_on(world.cache.nodes[node])
            assert all(isinstance(v, int) and v >= 0 for k, v in free.items() if k.startswith("devices:"))
        world.filter(names[0])
        assert world.coordinator.check_invariants() == []
        feed.delete(SOURCES[kind], obj)
