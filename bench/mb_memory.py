"""Memory side of bench/microbench.py: RSS of a cache filled with nodes and pods, in a child process."""

from __future__ import annotations

import gc
from typing import Any

import orjson
from mb_cluster import bound_pod, make_node

from extender.cluster.cache import ClusterCache
from extender.config import Config


def _rss() -> int:
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def memory_main(nodes: int, pods: int, keep_full: bool, conn: Any) -> None:
    """Child process: RSS of a cache with ``nodes`` nodes and ``pods`` bound pods."""
    config = Config()
    base = _rss()
    cache = ClusterCache(tuple(level.node_label for level in config.levels))
    for i in range(nodes):
        cache.upsert_node(orjson.loads(orjson.dumps(make_node(i))))
    after_nodes = _rss()
    per_node = max(1, pods // nodes)
    kept: list[dict[str, Any]] = []
    sample_bytes = 0
    for i in range(pods):
        raw = orjson.dumps(bound_pod(i, i // per_node % nodes, i % per_node))
        if i == 0:
            sample_bytes = len(raw)
        obj = orjson.loads(raw)  # what the informer hands the cache
        if keep_full:
            kept.append(obj)
        else:
            cache.upsert_pod(obj)  # the full object is dropped after this
    after_pods = _rss()
    conn.send({"nodes": nodes, "pods": pods, "keep_full": keep_full, "rss_base": base,
               "rss_after_nodes": after_nodes, "rss_after_pods": after_pods,
               "pod_json_bytes": sample_bytes, "cache_pods": len(cache.pods)})
