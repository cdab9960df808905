#!/usr/bin/env python3
"""Cost of one pod event in the cache (``ClusterCache.upsert_pod``: the record, its filing into a
gang, the indexes): what every watch event and every pod of a relist pays.

    PYTHONPATH=<checkout> python bench/mb_pod_event.py

Prints microseconds per event, best of 5 repeats, for 2,000 pods of 250 annotation gangs (plus a
plain pod for every member) created pending and then bound, on 64 nodes. Compare revisions by running
it from two checkouts in turn, interleaved (docs/benchmarks.md).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from extender.cluster.cache import ClusterCache

LEVELS = ("topology.quorum.dev/block", "topology.quorum.dev/rack")
NODES = 64
GANGS, MEMBERS = 250, 8
REPEATS = 5


def node(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"n{i}", "labels": {LEVELS[0]: f"b{i // 16}", LEVELS[1]: f"r{i // 4}"}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(uid: str, gang: str | None) -> dict[str, Any]:
    annotations = {"quorum.dev/gang": gang, "quorum.dev/min-count": str(MEMBERS)} if gang else {}
    return {"metadata": {"uid": uid, "namespace": "ml", "name": uid, "labels": {"app": "train"},
                         "annotations": annotations},
            "spec": {"nodeName": "", "schedulerName": "quorum", "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}


def events() -> list[dict[str, Any]]:
    """Every pod created pending, then every pod bound (Running)."""
    pending = [pod(f"g{g}-{m}", f"g{g}") for g in range(GANGS) for m in range(MEMBERS)]
    pending += [pod(f"p{i}", None) for i in range(GANGS * MEMBERS)]
    bound = copy.deepcopy(pending)
    for i, obj in enumerate(bound):
        obj["spec"]["nodeName"] = f"n{i % NODES}"
        obj["status"]["phase"] = "Running"
    return pending + bound


def once(stream: list[dict[str, Any]]) -> float:
    cache = ClusterCache(LEVELS)
    for i in range(NODES):
        cache.upsert_node(node(i))
    started = time.perf_counter()
    for obj in stream:
        cache.upsert_pod(obj)
    return (time.perf_counter() - started) / len(stream)


def main() -> None:
    stream = events()
    best = min(once(stream) for _ in range(REPEATS))
    print(f"{best * 1e6:.2f} us per pod event ({len(stream)} events, best of {REPEATS})")


if __name__ == "__main__":
    main()
