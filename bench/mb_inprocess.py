"""In-process side of bench/microbench.py: the same cluster in a spawned child, timing request
decoding, the coordinator and response encoding separately, without HTTP."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import orjson
from mb_cluster import GANGS, SERIES_AFTER, SERIES_BEFORE, Cluster, request_bodies
from mb_measure import Profiled, in_child, per_request, rusage, summary_ms

from extender.adapters import wire


def inprocess_main(nodes: int, pods_per_node: int, warmup: int, requests: int, profile: bool,
                   profile_requests: int, conn: Any) -> None:
    """Child process: the same cluster, timing decode / coordinator / encode without HTTP."""
    cluster = Cluster(nodes, pods_per_node)
    bodies = request_bodies(nodes)
    coordinator = cluster.coordinator
    encoder = wire.ScoreEncoder(cluster.cache.nodes.__contains__, lambda: 2 * len(cluster.cache.nodes) + 1024)
    out: dict[str, Any] = {"series": [], "placements_ms": [], "profiles": {}}

    def once(verb: str, body: bytes) -> tuple[int, int, int]:
        t0 = time.perf_counter_ns()
        args = wire.parse_extender_args(body)
        t1 = time.perf_counter_ns()
        if verb == "filter":
            decision = coordinator.filter(args.pod, args.declared_gang, args.candidate_names)
            t2 = time.perf_counter_ns()
            wire.filter_answer(args, decision)  # as the server's handler encodes it
        else:
            table = coordinator.prioritize(args.pod, args.candidate_names)
            t2 = time.perf_counter_ns()
            encoder.encode(args.candidate_names, table)
        t3 = time.perf_counter_ns()
        return t1 - t0, t2 - t1, t3 - t2

    def run(series: list[tuple[str, str, str]]) -> None:
        for case, verb, which in series:
            body = bodies[which]
            assert body is not None
            for _ in range(warmup):
                once(verb, body)
            parse: list[int] = []
            decide: list[int] = []
            encode: list[int] = []
            total: list[int] = []
            before = rusage()
            for _ in range(requests):
                a, b, c = once(verb, body)
                parse.append(a)
                decide.append(b)
                encode.append(c)
                total.append(a + b + c)
            after = rusage()
            out["series"].append({"case": case, "verb": verb, "total": summary_ms(total),
                                  "parse": summary_ms(parse), "coordinator": summary_ms(decide),
                                  "encode": summary_ms(encode),
                                  "rusage": per_request(before, after, requests)})
            if profile:
                prof = Profiled()
                gc.collect()
                prof.profile.enable()
                for _ in range(profile_requests):
                    once(verb, body)
                prof.profile.disable()
                out["profiles"][f"{case}/{verb}"] = prof.rows(profile_requests)

    async def main() -> None:
        run(SERIES_BEFORE)
        for g in range(GANGS):
            pod = cluster.gang_pods[g][0]
            t0 = time.perf_counter_ns()
            member = wire.parse_extender_args(orjson.dumps({"Pod": pod, "NodeNames": []}))
            decision = coordinator.filter(member.pod, member.declared_gang, list(cluster.names))
            out["placements_ms"].append((time.perf_counter_ns() - t0) / 1e6)
            if len(decision.passing) != 1:
                raise RuntimeError(f"gang {g} did not reserve in-process")
        await asyncio.sleep(0)  # let the no-op requeue tasks run
        run(SERIES_AFTER)

    asyncio.run(main())
    conn.send(out)


def run_inprocess(nodes: int, pods_per_node: int, warmup: int, requests: int, profile: bool,
                  profile_requests: int) -> dict[str, Any]:
    result: dict[str, Any] = in_child(inprocess_main, nodes, pods_per_node, warmup, requests, profile,
                                       profile_requests)
    return result
