"""Where a run's capacity went, from the timelines ``cluster_bench.py --timeline DIR`` writes.

For runs whose pods complete (W5, W6): how many nodes were busy second by second, and how long nodes
stood free while a waiting gang would have fitted in them (capacity the scheduler left unused).
Pods take a whole node in W5; ``--pods-per-node`` says otherwise.

Usage:
  python bench/cb_timeline.py DIR/*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from cb_report import percentile

STEP = 0.5  # seconds between samples of the cluster's state


def load(path: Path) -> dict[str, dict[str, Any]]:
    return dict(json.loads(path.read_bytes()))


def gangs_of(pods: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    gangs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods.values():
        if pod["gang"]:
            gangs[pod["gang"]].append(pod)
    return gangs


def gang_times(members: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """When the whole gang was bound, and when its last member finished (None: never)."""
    bound = [m["bound"] for m in members]
    finished = [m["finished"] for m in members]
    return (None if None in bound else max(bound)), (None if None in finished else max(finished))


def summary(name: str, pods: dict[str, dict[str, Any]], nodes: int, per_node: int) -> dict[str, Any]:
    """Busy slots over time, and slot-seconds left free while some waiting gang would have fitted."""
    gangs = gangs_of(pods)
    end = max((p["finished"] or p["bound"] or 0.0) for p in pods.values())
    slots = nodes * per_node
    busy_sum = wasted = 0.0
    samples = int(end / STEP) + 1
    for i in range(samples):
        now = i * STEP
        busy = sum(1 for p in pods.values() if p["bound"] is not None and p["bound"] <= now
                   and (p["finished"] is None or p["finished"] > now))
        free = slots - busy
        waiting = [len(m) for m in gangs.values() if any(p["bound"] is None or p["bound"] > now for p in m)
                   and all(p["bound"] is None or p["bound"] > now for p in m)]
        smallest = min(waiting, default=0)
        if waiting and free >= smallest:
            wasted += STEP * free
        busy_sum += STEP * busy
    done = [t for t in (gang_times(m)[1] for m in gangs.values()) if t is not None]
    return {"run": name, "gangs": len(gangs), "completed": len(done), "end_s": round(end, 1),
            "utilization": round(busy_sum / (slots * end), 3) if end else None,
            "free_while_a_gang_fitted_slot_s": round(wasted), "slot_s": round(slots * end)}


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"p50": round(percentile(values, 50), 2), "p90": round(percentile(values, 90), 2),
            "max": max(values)}


def kubelet_lag(pods: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Seconds from bound to running and from running to finished, as the (fake) kubelet reported
    them: time a node is busy that no scheduler decides. Older timelines have no ``running``."""
    timed = [p for p in pods.values() if p.get("running") is not None and p["bound"] is not None]
    waits = [p["running"] - p["bound"] for p in timed]
    return {"bound_to_running_s": percentiles(waits), "bound_not_running_slot_s": round(sum(waits)),
            "running_to_finished_s": percentiles([p["finished"] - p["running"] for p in timed
                                                  if p["finished"] is not None])}


def busy_curve(pods: dict[str, dict[str, Any]], every: float = 5.0) -> list[int]:
    end = max((p["finished"] or p["bound"] or 0.0) for p in pods.values())
    return [sum(1 for p in pods.values() if p["bound"] is not None and p["bound"] <= t
                and (p["finished"] is None or p["finished"] > t))
            for t in (k * every for k in range(int(end / every) + 1))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", type=Path, nargs="+")
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods-per-node", type=int, default=1)
    args = p.parse_args(argv)
    for path in args.files:
        pods = load(path)
        print(json.dumps(summary(path.stem, pods, args.nodes, args.pods_per_node) | kubelet_lag(pods)))
        print("  busy every 5 s:", " ".join(str(n) for n in busy_curve(pods)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
