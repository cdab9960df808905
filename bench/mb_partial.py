#!/usr/bin/env python3
"""What the walk for partly bound gangs costs on each placement, by the number of running gangs.

    python bench/mb_partial.py [--nodes 1000] [--gangs 10,100,500] [--repeat 200]

Every placement first repairs gangs bound short of minCount (``Planner.partial_gangs``), which
walks every gang the cache knows. This builds a cache of kwok-like nodes (``mb_cluster``) and
``--gangs`` running gangs of 16 bound members each, and times that walk: the median and the 90th
percentile over ``--repeat`` calls, and the share spent building the ledger's in-flight map. Then
it gives every gang one more member, pending (a replacement a controller created), and times the
walk again: every gang is then one Quorum must look at. It only measures and prints; it asserts
nothing about speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.mb_cluster import GANG_SIZE, Cluster, gang_pod, node_name


def running_gangs(cluster: Cluster, gangs: int, nodes: int) -> None:
    """``gangs`` gangs of GANG_SIZE members, every member bound, round-robin over the nodes (the walk
    reads no capacity, so nodes holding more members than fit do not matter here)."""
    for g in range(gangs):
        for m in range(GANG_SIZE):
            pod = gang_pod(7_000_000 + g * 100 + m, f"run-{g}", m)
            pod["spec"]["nodeName"] = node_name((g * GANG_SIZE + m) % nodes)
            pod["status"]["phase"] = "Running"
            cluster.cache.upsert_pod(pod)


def pending_replacements(cluster: Cluster, gangs: int) -> None:
    """One more member for each running gang, not bound yet: the gang is at quorum, not partial, but
    it has both bound and pending members, so the walk reads its members."""
    for g in range(gangs):
        cluster.cache.upsert_pod(gang_pod(7_000_000 + g * 100 + GANG_SIZE, f"run-{g}", GANG_SIZE))


def timed(call: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()  # type: ignore[operator]
        out.append(time.perf_counter() - started)
    return sorted(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gangs", default="10,100,500")
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    print(f"{'gangs':>6} {'walk median':>12} {'walk p90':>10} {'per gang':>9} {'in-flight map':>14} "
          f"{'with a pending member each':>27}")
    for gangs in (int(g) for g in args.gangs.split(",")):
        cluster = Cluster(args.nodes, 0)
        running_gangs(cluster, gangs, args.nodes)
        planner, ledger = cluster.coordinator.planner, cluster.coordinator.core.ledger
        walk = timed(partial(planner.partial_gangs, ""), args.repeat)
        inflight = timed(ledger.inflight, args.repeat)
        pending_replacements(cluster, gangs)
        walk_pending = timed(partial(planner.partial_gangs, ""), args.repeat)
        median = statistics.median(walk)
        total = gangs + 3  # the cluster's own gangs (waiting, no-fit, reserved-case) are walked too
        print(f"{gangs:>6} {median * 1e3:>10.3f}ms {walk[int(len(walk) * 0.9)] * 1e3:>8.3f}ms "
              f"{median / total * 1e6:>7.1f}µs {statistics.median(inflight) * 1e6:>12.2f}µs "
              f"{statistics.median(walk_pending) * 1e3:>25.3f}ms")


if __name__ == "__main__":
    main()
