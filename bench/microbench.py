#!/usr/bin/env python3
"""Micro-benchmark of the Quorum extender's request path and cache memory.

    python bench/microbench.py [--nodes 1000,5000,15000] [--requests N] [--json out.json]

What it does, per node count:

1. A **server process** builds a ClusterCache (levels from ``Config().levels``) with synthetic kwok-like
   nodes (block / rack / hostname labels; 64 cpu, 512Gi, 110 pods, 8 GPUs; 16 nodes per rack, 16 racks
   per block), a few bound pods per node, and a handful of pending annotated gangs; wires a Coordinator
   (no-op cluster actions) and Metrics into ``build_app`` and serves it with aiohttp on 127.0.0.1.
2. The **client** (this process, a different core) sends sequential requests over one keep-alive
   connection, shaped exactly as kube-scheduler sends them with ``nodeCacheCapable: true``:
   ``{"Pod": {...}, "Nodes": null, "NodeNames": [every node]}``. It records the wall time of each
   request, and the server's handler time (a timing middleware the benchmark appends innermost, so it
   covers body read + decode + coordinator + encode, not aiohttp's HTTP parsing and writing).
3. An **in-process** run (a fresh process, same cluster, no HTTP) times ``wire.parse_extender_args``,
   ``Coordinator.filter`` / ``prioritize`` and the response encoding separately.

Cases: (a) a plain pod, no reservations anywhere; (b) a plain pod while gangs hold reservations
(made by sending /filter for one member of each gang, as the scheduler would); (c) a reserved gang
member, whose filter answers its reserved node, and its prioritize over every node (the distance
scoring path; the scheduler skips prioritize when one node is feasible, so this shows the cost of that
path rather than a call that happens for this pod); (d) a member of a gang still waiting for quorum,
rejected on every node; (e) a member of a gang that fits in no rack, answered from the cached no-fit
(the first call, in the warm-up, does the search).

Finally a **memory** process measures the RSS of a cache holding 5,000 nodes and 50,000 realistic
pods added through ``cache.upsert_pod`` (each full object is decoded from JSON like the informer does,
then dropped), and, for comparison, the RSS of keeping those full objects.

The benchmark only measures and prints; it asserts nothing about speed.

This script parses the options and runs the parts; they live in sibling modules: ``mb_cluster``
(synthetic nodes, pods, gangs, the cluster and the request bodies), ``mb_http`` (server process and
client), ``mb_inprocess``, ``mb_memory``, ``mb_measure`` (percentiles, cProfile, getrusage, child
processes) and ``mb_report`` (the printed tables).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

# Sibling modules (this script's directory is on sys.path, also in the spawned children).
import mb_http  # noqa: E402
import mb_inprocess  # noqa: E402
from mb_cluster import GANG_SIZE, GANGS, NODES_PER_RACK, RACKS_PER_BLOCK  # noqa: E402
from mb_measure import in_child  # noqa: E402
from mb_memory import memory_main  # noqa: E402
from mb_report import machine, print_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1000,5000,15000", help="comma-separated node counts")
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per series")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured requests before each series")
    parser.add_argument("--pods-per-node", type=int, default=4, help="bound pods per node")
    parser.add_argument("--memory-nodes", type=int, default=5000)
    parser.add_argument("--memory-pods", type=int, default=50_000)
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS measurement")
    parser.add_argument("--profile", default="",
                        help="comma-separated node counts to also profile with cProfile")
    parser.add_argument("--profile-requests", type=int, default=300)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment for the server / in-process / memory processes "
                             "(e.g. MALLOC_TRIM_THRESHOLD_=268435456); repeatable")
    parser.add_argument("--json", dest="json_out", help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    child_env = dict(item.split("=", 1) for item in args.env)
    os.environ.update(child_env)  # spawned children start from this environment

    node_counts = [int(n) for n in args.nodes.split(",") if n.strip()]
    profiled = {int(n) for n in args.profile.split(",") if n.strip()}
    report: dict[str, Any] = {
        "machine": machine(),
        "params": {"nodes": node_counts, "requests": args.requests, "warmup": args.warmup,
                   "pods_per_node": args.pods_per_node, "gangs": GANGS, "gang_size": GANG_SIZE,
                   "nodes_per_rack": NODES_PER_RACK, "racks_per_block": RACKS_PER_BLOCK,
                   "env": child_env},
        "runs": [],
    }
    for nodes in node_counts:
        print(f"{nodes} nodes: HTTP ...", file=sys.stderr, flush=True)
        prof = nodes in profiled
        common = (nodes, args.pods_per_node, args.warmup, args.requests, prof, args.profile_requests)
        http_result = mb_http.run_http(*common)
        print(f"{nodes} nodes: in-process ...", file=sys.stderr, flush=True)
        inproc = mb_inprocess.run_inprocess(*common)
        report["runs"].append({"nodes": nodes, "http": http_result, "inprocess": inproc,
                               "loadavg_1m_after": os.getloadavg()[0]})
    if not args.no_memory:
        print("memory ...", file=sys.stderr, flush=True)
        report["memory"] = {
            "records": in_child(memory_main, args.memory_nodes, args.memory_pods, False),
            "full": in_child(memory_main, args.memory_nodes, args.memory_pods, True),
        }
    print_report(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
