#!/usr/bin/env python3
"""What one whole-gang placement costs, and the candidate list it starts from, by node count.

    python bench/mb_plan.py [--nodes 1000,5000] [--repeat 300]

Builds a cache of kwok-like nodes with two bound pods each (``mb_cluster``) and a pending gang of
16 members with a required rack, then times ``Planner.candidates`` (every node's free capacity as
the gang sees it) and ``Planner.plan`` (the candidates plus the search) with nothing reserved: the
median over ``--repeat`` calls. Compare revisions by running it from two checkouts in turn,
interleaved. It only measures and prints; it asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.mb_cluster import Cluster


def median_ms(call: Callable[[], object], repeat: int) -> float:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return statistics.median(out) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'candidates ms':>14} {'plan ms':>8}")
    for nodes in (int(n) for n in args.nodes.split(",")):
        cluster = Cluster(nodes, 2)
        planner = cluster.coordinator.planner
        key = next(k for k in cluster.cache.gang_members if k.endswith("train-0"))
        spec = cluster.cache.gang_spec(key)
        assert spec is not None
        pending = {m.uid: m for m in cluster.cache.members(key)}
        candidates = median_ms(partial(planner.candidates, cluster.names, key, None, True), args.repeat)
        plan = median_ms(partial(planner.plan, spec, pending, cluster.names, [], None), args.repeat)
        print(f"{nodes:>6} {candidates:>14.3f} {plan:>8.3f}")


if __name__ == "__main__":
    main()
