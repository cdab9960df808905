"""What a full list of nodes leaves resident: the informer holds every item of a list until its last
page, then the cache turns them into records and the decoded objects are dropped. Freed or not,
the peak shapes the heap that stays.

Each configuration runs in a fresh process: pages of 500 nodes (the informer's page size) are
decoded one after the other, as ``KubeClient.list_objects`` does, with or without
``informer.drop_unread`` on each page, and handed to ``ClusterCache.replace_nodes``. The nodes
carry what the apiserver sends for a kubelet's node: five conditions and the managedFields of
three writers, plus ``--images`` entries of ``status.images`` (a real node lists up to 50; kwok's
none). Configurations alternate over ``--reps``.

    python bench/mb_list_memory.py                        # 5,000 nodes, no images, 2 reps
    python bench/mb_list_memory.py --nodes 5000 --images 50
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mb_cluster import make_node

from extender.adapters.informer import drop_unread
from extender.cluster.cache import ClusterCache
from extender.config import Config

PAGE = 500
CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def _fields(*names: str) -> dict[str, Any]:
    return {f"f:{name}": {} for name in names}


def listed_node(i: int, images: int) -> dict[str, Any]:
    """A node as a list returns it (``make_node`` with what a kubelet's node also carries)."""
    node = make_node(i)
    stamp = "2026-11-28T07:00:00Z"
    node["status"]["conditions"] = [
        {"type": kind, "status": "True" if kind == "Ready" else "False", "reason": f"Kubelet{kind}",
         "message": f"kubelet reports {kind}", "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for kind in CONDITIONS]
    per_condition = _fields("lastHeartbeatTime", "lastTransitionTime", "message", "reason", "status", "type")
    node["metadata"]["managedFields"] = [
        {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet", "operation": "Update",
         "time": stamp, "fieldsV1": {"f:metadata": {"f:labels": _fields(*node["metadata"]["labels"])}}},
        {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-controller-manager",
         "operation": "Update", "time": stamp,
         "fieldsV1": {"f:metadata": {"f:annotations": _fields("node.alpha.kubernetes.io/ttl")}}},
        {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet", "operation": "Update",
         "subresource": "status", "time": stamp,
         "fieldsV1": {"f:status": {"f:conditions": {f'k:{{"type":"{kind}"}}': per_condition
                                                    for kind in CONDITIONS},
                                   "f:nodeInfo": _fields("architecture", "kubeletVersion", "operatingSystem"),
                                   "f:addresses": {}, "f:allocatable": {}, "f:capacity": {}}}},
    ]
    node["status"]["images"] = [
        {"names": [f"registry.example.com/team-{k % 7}/image-{k}@sha256:{k:064x}",
                   f"registry.example.com/team-{k % 7}/image-{k}:v1.{k}"], "sizeBytes": 100_000_000 + k}
        for k in range(images)]
    return node


def _resident_mib() -> float:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(nodes: int, images: int, trim: bool, conn: Any) -> None:
    """Child process: resident memory before the list and after the cache has taken it."""
    pages = [orjson.dumps({"metadata": {}, "items": [listed_node(i, images)
                                                     for i in range(start, min(start + PAGE, nodes))]})
             for start in range(0, nodes, PAGE)]
    cache = ClusterCache(tuple(level.node_label for level in Config().levels))
    before = _resident_mib()
    items: list[dict[str, Any]] = []
    for body in pages:
        page = orjson.loads(body)["items"]
        for obj in page if trim else ():
            drop_unread(obj)
        items.extend(page)
    cache.replace_nodes(items)
    del items, page
    after = _resident_mib()
    conn.send({"bytes_per_node": len(pages[0]) // min(PAGE, nodes), "before": before, "after": after,
               "cached": len(cache.nodes)})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--images", type=int, default=0, help="status.images entries per node")
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    print(f"{args.nodes} nodes, {args.images} images each; resident memory (RssAnon) the list leaves\n")
    print("| rep | each page | JSON bytes/node | MiB after the cache took the list | of which the list's |")
    print("|--:|---|--:|--:|--:|")
    for rep in range(args.reps):
        for trim in (False, True) if rep % 2 == 0 else (True, False):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=measure, args=(args.nodes, args.images, trim, child))
            proc.start()
            row = parent.recv()
            proc.join()
            assert row["cached"] == args.nodes
            what = "drop_unread" if trim else "as sent"
            print(f"| {rep} | {what} | {row['bytes_per_node']} | {row['after']:.0f} | "
                  f"{row['after'] - row['before']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
