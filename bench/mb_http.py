"""HTTP side of bench/microbench.py: the server process (build_app on the synthetic cluster, with a
handler-timing middleware) and the client that sends the series over one keep-alive connection."""

from __future__ import annotations

import asyncio
import gc
import http.client
import multiprocessing as mp
import socket
import sys
import time
from typing import Any

import orjson
from mb_cluster import GANGS, SERIES_AFTER, SERIES_BASELINE, SERIES_BEFORE, Cluster, request_bodies
from mb_measure import Profiled, per_request, rusage, stop_child, summary_ms

TIMING_HEADER = "X-Bench-Handler-Ns"


# ----------------------------------------------------------------------------------------- server process


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def server_main(nodes: int, pods_per_node: int, conn: Any) -> None:
    """Child process: build the cluster, serve build_app, obey control messages on ``conn``."""
    from aiohttp import web

    from extender.adapters.server import build_app

    cluster = Cluster(nodes, pods_per_node)
    app = build_app(cluster.coordinator, cluster.cache, cluster.metrics, lambda: True,
                    cluster.config.max_request_bytes)

    @web.middleware
    async def handler_timing(request: web.Request, handler: Any) -> web.StreamResponse:
        started = time.perf_counter_ns()
        response: web.StreamResponse = await handler(request)
        response.headers[TIMING_HEADER] = str(time.perf_counter_ns() - started)
        return response

    app.middlewares.append(handler_timing)  # innermost: wraps the handler only
    profiler: list[Profiled] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = _free_socket()
        site = web.SockSite(runner, sock)
        await site.start()
        done = asyncio.Event()

        def on_message() -> None:
            message = conn.recv()
            command = message[0]
            if command == "profile-start":
                profiler[:] = [Profiled()]
                gc.collect()
                profiler[0].profile.enable()
                conn.send(("ok",))
            elif command == "profile-stop":
                profiler[0].profile.disable()
                conn.send(("ok", profiler[0].rows(message[1])))
            elif command == "rusage":
                conn.send(("ok", rusage()))
            elif command == "state":
                coordinator = cluster.coordinator
                conn.send(("ok", {"reserved_pods": coordinator.reserved_count()[""],
                                  "reserved_nodes": len(coordinator.reserved_nodes())}))
            elif command == "stop":
                done.set()

        loop.add_reader(conn.fileno(), on_message)
        conn.send(("ready", sock.getsockname()[1], cluster.build_seconds, len(cluster.cache.pods)))
        await done.wait()
        loop.remove_reader(conn.fileno())
        await runner.cleanup()

    asyncio.run(main())


class Client:
    """One keep-alive HTTP/1.1 connection, used sequentially like kube-scheduler's extender client."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def post(self, path: str, body: bytes | None) -> tuple[int, bytes, int]:
        """Return (wall ns, response body, server handler ns); a None body sends a GET."""
        started = time.perf_counter_ns()
        if body is None:
            self.conn.request("GET", path)
        else:
            self.conn.request("POST", path, body=body, headers=self.headers)
        response = self.conn.getresponse()
        data = response.read()
        wall = time.perf_counter_ns() - started
        if response.status != 200:
            raise RuntimeError(f"POST {path}: HTTP {response.status}: {data[:200]!r}")
        return wall, data, int(response.getheader(TIMING_HEADER) or 0)

    def close(self) -> None:
        self.conn.close()


def describe_response(verb: str, data: bytes) -> dict[str, int]:
    if verb == "healthz":
        return {"bytes": len(data)}
    doc = orjson.loads(data)
    if verb == "prioritize":
        return {"hosts": len(doc)}
    return {"passing": len(doc.get("NodeNames") or []), "failed": len(doc.get("FailedNodes") or {}),
            "unresolvable": len(doc.get("FailedAndUnresolvableNodes") or {})}



def http_series(client: Client, parent: Any, verb: str, body: bytes | None, warmup: int,
                requests: int) -> dict[str, Any]:
    path = f"/{verb}"
    data = b""
    for _ in range(warmup):
        _, data, _ = client.post(path, body)
    wall: list[int] = []
    handler: list[int] = []
    parent.send(("rusage",))
    server_before = parent.recv()[1]
    client_before = rusage()
    for _ in range(requests):
        w, data, h = client.post(path, body)
        wall.append(w)
        handler.append(h)
    client_after = rusage()
    parent.send(("rusage",))
    server_after = parent.recv()[1]
    return {"http": summary_ms(wall), "handler": summary_ms(handler),
            "request_bytes": len(body or b""), "response_bytes": len(data),
            "response": describe_response(verb, data),
            "server_rusage": per_request(server_before, server_after, requests),
            "client_rusage": per_request(client_before, client_after, requests)}


def run_http(nodes: int, pods_per_node: int, warmup: int, requests: int, profile: bool,
             profile_requests: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=server_main, args=(nodes, pods_per_node, child), daemon=True)
    proc.start()
    try:
        message = parent.recv()
        _, port, build_seconds, pod_count = message
        # The client needs the same request bodies; building them needs no cache.
        bodies = request_bodies(nodes)
        client = Client(port)
        results: dict[str, Any] = {"build_seconds": build_seconds, "pods": pod_count, "series": [],
                                   "placements_ms": [], "profiles": {}}

        def run(series: list[tuple[str, str, str]]) -> None:
            for case, verb, which in series:
                row = http_series(client, parent, verb, bodies[which], warmup, requests)
                row.update(case=case, verb=verb)
                results["series"].append(row)
                if profile:
                    parent.send(("profile-start",))
                    parent.recv()
                    for _ in range(profile_requests):
                        client.post(f"/{verb}", bodies[which])
                    parent.send(("profile-stop", profile_requests))
                    results["profiles"][f"{case}/{verb}"] = parent.recv()[1]
                print(f"  http {nodes:>6} nodes  {case} {verb:<10} p50 {row['http']['p50']:.3f} ms  "
                      f"p99 {row['http']['p99']:.3f} ms", file=sys.stderr, flush=True)

        run(SERIES_BASELINE + SERIES_BEFORE)
        for g in range(GANGS):  # the first member of each gang places and reserves the whole gang
            wall, data, _ = client.post("/filter", bodies[f"gang-{g}-trigger"])
            passing = orjson.loads(data)["NodeNames"] or []
            if len(passing) != 1:
                raise RuntimeError(f"gang {g} did not reserve: {data[:300]!r}")
            results["placements_ms"].append(wall / 1e6)
        parent.send(("state",))
        results["state"] = parent.recv()[1]
        run(SERIES_AFTER)
        client.close()
        parent.send(("stop",))
    finally:
        stop_child(proc, 30)
    return results
