"""The long fuzz run: ``python -m tests.fuzz.run --count 1000000`` (what ``hack/fuzz.sh`` runs).

Inputs are split over worker processes (one per core by default), each with its own app, world
and seed, and spread evenly over the four verbs. Prints the totals and exits non-zero if any input
crashed the app, got a 5xx, was answered outside the protocol or hung, or if the core's invariants
broke.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from .harness import Totals, describe, fuzz


def _worker(seed: str, count: int) -> Totals:
    def progress(totals: Totals) -> None:
        print(f"  [{seed}] {totals.inputs:,} inputs, {totals.failures} failures", file=sys.stderr, flush=True)

    # Memory growth is measured from the end of a warm-up (caches filled, allocator arenas grown).
    return asyncio.run(fuzz(seed, count, warmup=min(20_000, count // 10), progress=progress))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="inputs in all (default 1,000,000)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", default="quorum", help="base seed; worker i uses SEED-i")
    args = parser.parse_args(argv)
    shares = [args.count // args.workers + (i < args.count % args.workers) for i in range(args.workers)]
    started = time.perf_counter()
    totals = Totals()
    growth: list[float] = []
    objects: list[int] = []
    with ProcessPoolExecutor(args.workers) as pool:
        futures = [pool.submit(_worker, f"{args.seed}-{i}", n) for i, n in enumerate(shares) if n]
        for future in futures:
            part = future.result()
            growth.append((part.rss_end - part.rss_start) / 2**20)
            objects.append(part.objects_end - part.objects_start)
            totals.merge(part)
    summary = describe(totals)
    # Per worker, the worst one: RSS after the warm-up to the end, and objects the GC tracks.
    summary["memory growth (MiB)"] = round(max(growth, default=0.0), 2)
    summary["tracked objects growth"] = max(objects, default=0)
    summary["workers"] = args.workers
    summary["seed"] = args.seed
    summary["duration (s)"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary, indent=2))
    for example in totals.examples:
        print(example[:1000])
    return 1 if totals.failures or totals.invariant_violations else 0


if __name__ == "__main__":
    sys.exit(main())
