#!/usr/bin/env python3
"""Cost of following a gang member's whole life in the gang core: the watch events after the bind
(bound, Running, Ready, Succeeded, deleted) through the cache and the core's reactions.

    PYTHONPATH=<checkout> python bench/mb_pod_life.py [--gangs 125] [--size 16] [--profile]

Gangs (of 16 members unless ``--size`` says otherwise) on 1,024 synthetic nodes are filtered,
reserved and bound in process (no HTTP, every side effect a no-op), then each member goes through
its life one watch event at a time, as W5's pods do in the cluster benchmark. Prints microseconds
per pod for the placement and binding and for the life after it, best of 5 repeats; ``--profile``
prints where the life's time goes (cProfile), ``--memory`` what the cache's per-gang member sets
hold per member while every gang runs (at most 1,024 members: one a node). Compare revisions by
running it from two checkouts in turn, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import pstats
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from mb_cluster import gang_pod, make_node, node_name

from extender.cluster.cache import ClusterCache
from extender.cluster.conventions import declared_by_pod
from extender.config import Config, GangTimings
from extender.gang.coordinator import Coordinator
from extender.gang.effects import NoActions
from extender.metrics import Metrics

NODES = 1024
GANG_SIZE = 16
REPEATS = 5
SORT = "cumulative"


def _stage(pod: dict[str, Any], stage: str) -> dict[str, Any]:
    """The pod as the watch shows it at ``stage`` (a new object each time, as the informer decodes)."""
    out = copy.deepcopy(pod)
    status = out.setdefault("status", {})
    if stage in ("running", "ready", "succeeded"):
        status["phase"] = "Running"
        status["startTime"] = "2026-01-01T00:00:00Z"  # a kubelet took it
        status["conditions"] = [{"type": "PodScheduled", "status": "True"},
                                {"type": "Ready", "status": "True" if stage != "running" else "False"}]
    if stage == "succeeded":
        status["phase"] = "Succeeded"
        status["conditions"][1]["status"] = "False"
    return out


class Run:
    """One fresh cache and coordinator, and the gangs it places, binds and follows."""

    def __init__(self, gangs: int, size: int) -> None:
        config = Config(gang=GangTimings(bind_timeout_seconds=86_400.0))
        self.cache = ClusterCache(tuple(level.node_label for level in config.levels))
        self.coordinator = Coordinator(config, self.cache, NoActions(), Metrics())
        for i in range(NODES):
            self.cache.upsert_node(make_node(i))
        for kind in self.cache.synced:
            self.cache.synced[kind] = True
        self.names = [node_name(i) for i in range(NODES)]
        self.gangs = [[gang_pod(7_000_000 + g * 10_000 + m, f"life-{g}", m, size) for m in range(size)]
                      for g in range(gangs)]
        for pod in (p for gang in self.gangs for p in gang):
            pod["metadata"]["annotations"].pop("quorum.dev/required-topology", None)
            self.cache.upsert_pod(pod)

    async def place_and_bind(self, gang: list[dict[str, Any]]) -> None:
        binds = []
        for pod in gang:
            record = self.cache.pods[pod["metadata"]["uid"]]  # what the request's pod decodes to
            decision = self.coordinator.filter(record, declared_by_pod(pod), self.names)
            if len(decision.passing) != 1:
                answer = decision.reason or decision.passing
                raise RuntimeError(f"{record.key}: not reserved one node: {answer}"[:200])
            node = pod["spec"]["nodeName"] = decision.passing[0]
            meta = pod["metadata"]
            binds.append(self.coordinator.bind(meta["namespace"], meta["name"], meta["uid"], node))
        errors = [e for e in await asyncio.gather(*binds) if e]
        if errors:
            raise RuntimeError(f"bind failed: {errors[0]}")

    @staticmethod
    def events(gang: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """The watch events of the gang's members after the bind, member by member per stage
        (built before the clock starts: decoding them is the informer's cost, not the core's)."""
        events = [("upsert", _stage(pod, stage)) for stage in ("bound", "running", "ready", "succeeded")
                  for pod in gang]
        return events + [("delete", _stage(pod, "succeeded")) for pod in gang]

    def live(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        for kind, obj in events:
            if kind == "upsert":
                self.cache.upsert_pod(obj)
            else:
                self.cache.delete_pod(obj)


def measure(gangs: int, size: int, profile: bool) -> tuple[float, float]:
    """(µs per pod placing and binding, µs per pod living) of one fresh run."""
    run = Run(gangs, size)
    loop = asyncio.new_event_loop()
    placed = lived = 0.0
    profiler = cProfile.Profile() if profile else None
    try:
        for gang in run.gangs:
            t0 = time.perf_counter()
            loop.run_until_complete(run.place_and_bind(gang))
            placed += time.perf_counter() - t0
            events = run.events(gang)
            t1 = time.perf_counter()
            timed: Callable[[], None] = lambda events=events: run.live(events)  # type: ignore[misc]  # noqa: E731
            if profiler is not None:
                profiler.runcall(timed)
            else:
                timed()
            lived += time.perf_counter() - t1
    finally:
        loop.close()
    if run.coordinator.gangs():
        raise RuntimeError(f"gangs left behind: {run.coordinator.gangs()[:3]}")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats(SORT).print_stats(30)
    pods = gangs * size
    return placed / pods * 1e6, lived / pods * 1e6


def state_bytes(gangs: int, size: int) -> tuple[float, float]:
    """Bytes per member of the cache's per-gang member sets (the member states and the gang index)
    with every gang bound, Running and Ready: the most they hold."""
    run = Run(gangs, size)
    loop = asyncio.new_event_loop()
    try:
        for gang in run.gangs:
            loop.run_until_complete(run.place_and_bind(gang))
            run.live(run.events(gang)[:3 * size])  # bound, Running, Ready
    finally:
        loop.close()
    membership = run.cache.membership

    def held(index: Mapping[str, set[str]]) -> int:
        return sys.getsizeof(index) + sum(sys.getsizeof(uids) for uids in index.values())

    members = gangs * size
    return (sum(held(index) for index in membership.in_state.values()) / members,
            held(membership.gang_members) / members)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gangs", type=int, default=125)
    parser.add_argument("--size", type=int, default=GANG_SIZE, help="members per gang")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--memory", action="store_true", help="bytes per member of the member sets")
    args = parser.parse_args()
    if args.memory:
        states, index = state_bytes(args.gangs, args.size)
        print(f"{args.gangs} gangs of {args.size}, bound, Running and Ready: member states {states:.0f} B "
              f"per member, the gang index {index:.0f} B per member")
        return
    if args.profile:
        measure(args.gangs, args.size, True)
        return
    results = [measure(args.gangs, args.size, False) for _ in range(REPEATS)]
    print(f"{args.gangs} gangs of {args.size} on {NODES} nodes, best of {REPEATS}: "
          f"place and bind {min(r[0] for r in results):.1f} µs/pod, "
          f"life after the bind {min(r[1] for r in results):.1f} µs/pod "
          f"({min(r[1] for r in results) / 5:.1f} µs per event)")


if __name__ == "__main__":
    main()
