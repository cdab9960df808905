"""A relist of every table: gone objects deleted, the listed ones loaded, a bad one handed back alone."""

from __future__ import annotations

from typing import Any

from extender.cluster.cache import ClusterCache
from extender.cluster.dra.feed import DEVICE_SOURCES, DeviceFeed
from extender.cluster.relist import relist
from extender.cluster.scale_ups import ScaleUpTable

from .dra_objects import resource_slice
from .fixtures import LEVEL_LABELS, make_node, make_pod, make_podgroup

SLICES = next(s for s in DEVICE_SOURCES if s.name == "resourceslices")


def test_relist_deletes_what_is_gone_first_and_keeps_loading_after_a_failure() -> None:
    table = {"a": 1, "b": 2}
    calls: list[str] = []

    def delete(key: str) -> None:
        calls.append(f"-{key}")
        del table[key]

    def upsert(obj: dict[str, Any]) -> None:
        if obj["v"] < 0:
            raise ValueError("negative")
        calls.append(f"+{obj['k']}")
        table[obj["k"]] = obj["v"]

    bad = {"k": "x", "v": -1}
    rejected = relist([{"k": "b", "v": 3}, bad, {"k": "c", "v": 4}], lambda o: o["k"], table, delete, upsert)
    assert calls == ["-a", "+b", "+c"]
    assert table == {"b": 3, "c": 4}
    assert [(obj, str(exc)) for obj, exc in rejected] == [(bad, "negative")]


def test_cache_tables_relist_alike() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    cache.replace_nodes([make_node("n0", "b0", "b0-r0"), make_node("n1", "b0", "b0-r0")])
    cache.replace_pods([make_pod("w0", "u0", node="n0"), make_pod("w1", "u1")])
    cache.replace_podgroups([make_podgroup("old", 2)])

    rejected = cache.replace_nodes([make_node("n1", "b0", "b0-r0"), "not a node"])  # type: ignore[list-item]
    assert set(cache.nodes) == {"n1"} and len(rejected) == 1
    rejected = cache.replace_pods([make_pod("w1", "u1"), 7])  # type: ignore[list-item]
    assert set(cache.pods) == {"u1"} and len(rejected) == 1
    assert cache.replace_podgroups([make_podgroup("new", 3)]) == []
    assert cache.gang_spec("ml/old") is None and cache.gang_spec("ml/new") is not None


def test_device_and_scale_up_tables_relist_and_hand_back_what_is_not_an_object() -> None:
    cache = ClusterCache(LEVEL_LABELS)
    feed = DeviceFeed(cache)
    feed.replace(SLICES, [resource_slice("n0"), resource_slice("n1")])
    rejected = feed.replace(SLICES, [resource_slice("n1"), ["not", "an", "object"]])  # type: ignore[list-item]
    assert len(rejected) == 1
    assert cache.devices.has_devices("n1") and not cache.devices.has_devices("n0")

    table = ScaleUpTable()
    heard: list[str] = []
    table.on_change = heard.append
    a, b = ({"metadata": {"namespace": "ml", "name": name}} for name in "ab")
    table.replace([a, b])
    rejected = table.replace([b, "junk"])  # type: ignore[list-item]
    assert set(table.requests) == {"ml/b"} and len(rejected) == 1
    assert heard == ["ml/a", "ml/b", "ml/a"]
