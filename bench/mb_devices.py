#!/usr/bin/env python3
"""What counting DRA devices costs, side by side with the same GPUs as an extended resource.

    python bench/mb_devices.py [--nodes 5000] [--reps 5] [--json out.json]

Two clusters of the same shape (``mb_cluster``: 16 nodes a rack, 16 racks a block, 8 GPUs a node,
a 4-GPU pod on every node of the even racks) are built in one process:

* **extended**: the GPUs are ``nvidia.com/gpu`` and pods request them;
* **dra**: every node publishes a ResourceSlice of 8 devices (each with its own uuid attribute, as
  real drivers publish them, so no two devices share a selector result), a DeviceClass selects them with CEL,
  the 4-GPU pods hold allocated claims, and gang members ask through a ResourceClaimTemplate.

Measured per configuration, interleaved (extended, dra, extended, ...) so the machine's noise hits
both alike, each a median over ``--reps`` repetitions:

* **load**: filling the cache (nodes, pods, and for dra the slices, class, template and claims);
* **first** and **place**: the first filter call of a new 16-member gang that requires one rack,
  over every node (a full placement search: a new gang each time, so nothing is answered from
  memory); ``first`` is the first gang after the load, when every node's free capacity (and for dra
  its free devices, each device matched against the class once) is still to be counted;
  ``place`` is the median of the next gangs;
* **recount**: after the DeviceClass changes, counting the free devices of every node again (the
  worst case of the inventory: every node's count is dropped and every selector re-evaluated);
* **claim**: one claim allocated on a node, then that node's free capacity read again.

Wall and CPU time are reported, and the dra / extended ratio. The script measures and prints; it
asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mb_cluster import GPU, NoopActions, bound_pod, gang_pod, make_node, node_name  # noqa: E402
from mb_report import machine  # noqa: E402

from extender.cluster.cache import ClusterCache  # noqa: E402
from extender.cluster.dra.feed import DEVICE_SOURCES, DeviceFeed  # noqa: E402
from extender.config import Config, GangTimings  # noqa: E402
from extender.gang.coordinator import Coordinator  # noqa: E402
from extender.metrics import Metrics  # noqa: E402

DRIVER = "gpu.example.com"
SOURCES = {s.name: s for s in DEVICE_SOURCES}
GANG = 16
PLACEMENTS = 5  # gangs placed after the first, per repetition


def device_slice(node: str) -> dict[str, Any]:
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {"metadata": {"name": f"{node}-gpu"}, "spec": {
        "driver": DRIVER, "nodeName": node, "pool": pool,
        "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "h100"}, "index": {"int": i},
                                                         "uuid": {"string": f"GPU-{node}-{i}"}},
                     "capacity": {"memory": {"value": "80Gi"}}} for i in range(8)]}}


def device_class(model: str) -> dict[str, Any]:
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "{model}"'
    return {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def template(count: int) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": count}}
    return {"metadata": {"name": f"gpu-{count}", "namespace": "ml"},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def as_dra(pod: dict[str, Any], count: int, claim: str = "") -> dict[str, Any]:
    """The pod asking for its GPUs through a claim instead (``claim``: the one made for it)."""
    for container in pod["spec"]["containers"]:
        for part in ("requests", "limits"):
            container.get("resources", {}).get(part, {}).pop(GPU, None)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": f"gpu-{count}"}]
    if claim:
        pod.setdefault("status", {})["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return pod


def allocated_claim(pod: dict[str, Any], node: str, count: int) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"metadata": {"name": f"{meta['name']}-gpu", "namespace": meta["namespace"],
                         "ownerReferences": [{"kind": "Pod", "name": meta["name"], "uid": meta["uid"]}]},
            "spec": template(count)["spec"]["spec"],
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{i}"}
                for i in range(count)]}}}}


class Setup:
    def __init__(self, nodes: int, dra: bool) -> None:
        self.config = Config(gang=GangTimings(bind_timeout_seconds=86_400.0))
        self.cache = ClusterCache(tuple(level.node_label for level in self.config.levels))
        self.coordinator = Coordinator(self.config, self.cache, NoopActions(), Metrics())
        self.feed, self.dra, self.nodes, self.gangs = DeviceFeed(self.cache), dra, nodes, 0
        for i in range(nodes):
            node = make_node(i)
            if dra:
                node["status"]["allocatable"].pop(GPU, None)
                node["status"]["capacity"].pop(GPU, None)
            self.cache.upsert_node(node)
        if dra:
            self.feed.upsert(SOURCES["deviceclasses"], device_class("h100"))
            self.feed.upsert(SOURCES["resourceclaimtemplates"], template(8))
            self.feed.upsert(SOURCES["resourceclaimtemplates"], template(4))
            for i in range(nodes):
                self.feed.upsert(SOURCES["resourceslices"], device_slice(node_name(i)))
        for n in range(nodes):
            pod = bound_pod(n, n, 0)
            if dra and "nvidia.com/gpu" in str(pod["spec"]["containers"]):
                claim = allocated_claim(pod, node_name(n), 4)
                self.feed.upsert(SOURCES["resourceclaims"], claim)
                pod = as_dra(pod, 4, claim["metadata"]["name"])
            self.cache.upsert_pod(pod)
        for kind in self.cache.synced:
            self.cache.synced[kind] = True
        self.names = [node_name(i) for i in range(nodes)]

    def place_new_gang(self) -> bool:
        """The first member's filter of a fresh required-rack gang: a full placement search."""
        self.gangs += 1
        members = [gang_pod(7_000_000 + self.gangs * 100 + m, f"g{self.gangs}", m, GANG)
                   for m in range(GANG)]
        for pod in members:
            self.cache.upsert_pod(as_dra(pod, 8) if self.dra else pod)
        record = self.cache.pods[members[0]["metadata"]["uid"]]
        return bool(self.coordinator.filter(record, None, self.names).passing)

    def recount(self) -> None:
        self.feed.upsert(SOURCES["deviceclasses"], device_class("h100" if self.gangs % 2 else "H100"))
        self.feed.upsert(SOURCES["deviceclasses"], device_class("h100"))
        for i in range(self.nodes):
            self.cache.free_on(self.cache.nodes[node_name(i)])

    def claim_change(self) -> None:
        node = node_name(1)  # an odd rack: its devices are free
        pod = as_dra(bound_pod(9_000_000 + self.gangs, 1, 1), 2)
        self.gangs += 1
        claim = allocated_claim(pod, node, 2)
        self.feed.upsert(SOURCES["resourceclaims"], claim)
        self.cache.upsert_pod(pod)
        self.cache.free_on(self.cache.nodes[node])
        self.feed.delete(SOURCES["resourceclaims"], claim)
        self.cache.delete_pod(pod)


def timed(step: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu


def one_repetition(nodes: int, dra: bool, samples: dict[str, list[tuple[float, float]]]) -> None:
    setups: list[Setup] = []
    samples.setdefault("load", []).append(timed(lambda: setups.append(Setup(nodes, dra))))
    setup = setups[0]
    placed: list[bool] = []
    samples.setdefault("first", []).append(timed(lambda: placed.append(setup.place_new_gang())))
    for _ in range(PLACEMENTS):
        samples.setdefault("place", []).append(timed(lambda: placed.append(setup.place_new_gang())))
    assert all(placed), "the benchmark gangs must fit"  # a benchmark of a refusal would mislead
    if dra:
        samples.setdefault("recount", []).append(timed(setup.recount))
        samples.setdefault("claim", []).append(timed(setup.claim_change))


async def run(nodes: int, reps: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {"extended": {}, "dra": {}}
    for _ in range(reps):
        for name in ("extended", "dra"):
            one_repetition(nodes, name == "dra", samples[name])
    out: dict[str, Any] = {}
    for name, steps in samples.items():
        out[name] = {step: {"wall_ms": round(statistics.median(w for w, _ in s) * 1e3, 2),
                            "cpu_ms": round(statistics.median(c for _, c in s) * 1e3, 2)}
                     for step, s in steps.items()}
    out["ratio"] = {step: round(out["dra"][step]["cpu_ms"] / out["extended"][step]["cpu_ms"], 2)
                    for step in ("load", "first", "place") if out["extended"][step]["cpu_ms"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = {"nodes": args.nodes, "reps": args.reps, "machine": machine(),
              **asyncio.run(run(args.nodes, args.reps))}
    print(f"{args.nodes} nodes, median of {args.reps} interleaved repetitions ({result['machine']})")
    print(f"{'step':8} {'extended wall/cpu ms':>22} {'dra wall/cpu ms':>20} {'dra/extended cpu':>17}")
    for step in ("load", "first", "place", "recount", "claim"):
        ext, dra = result["extended"].get(step), result["dra"][step]
        shown = f"{ext['wall_ms']:>10} / {ext['cpu_ms']:<9}" if ext else f"{'-':>22}"
        ratio = result["ratio"].get(step, "")
        print(f"{step:8} {shown:>22} {dra['wall_ms']:>9} / {dra['cpu_ms']:<8} {ratio:>17}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
