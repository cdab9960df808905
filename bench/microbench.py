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
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import http.client
import json
import math
import multiprocessing as mp
import os
import platform
import pstats
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import orjson  # noqa: E402

from extender.adapters import wire  # noqa: E402
from extender.cluster.cache import ClusterCache  # noqa: E402
from extender.cluster.records import PodRecord  # noqa: E402
from extender.config import Config, GangTimings  # noqa: E402
from extender.gang.coordinator import Coordinator  # noqa: E402
from extender.metrics import Metrics  # noqa: E402

NODES_PER_RACK = 16
RACKS_PER_BLOCK = 16
GANGS = 4  # gangs that get a reservation in case (b)
GANG_SIZE = 16  # members per gang, 8 GPUs each: one whole odd rack per gang
WAITING_GANG_PODS = 4  # the case (d) gang has this many of its GANG_SIZE members
NOFIT_GANG_SIZE = GANG_SIZE + 1  # the case (e) gang: one member more than a rack has nodes
TIMING_HEADER = "X-Bench-Handler-Ns"
GPU = "nvidia.com/gpu"


# ----------------------------------------------------------------------------------------- fixtures


def _uid(kind: int, i: int) -> str:
    return f"{kind:08x}-0000-4000-8000-{i:012x}"


def node_name(i: int) -> str:
    rack_global, n = divmod(i, NODES_PER_RACK)
    b, r = divmod(rack_global, RACKS_PER_BLOCK)
    return f"kwok-b{b}-r{r}-n{n}"


def node_position(i: int) -> tuple[int, int]:
    rack_global = i // NODES_PER_RACK
    return divmod(rack_global, RACKS_PER_BLOCK)


def make_node(i: int) -> dict[str, Any]:
    name = node_name(i)
    b, r = node_position(i)
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(1, i),
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "topology.quorum.dev/block": f"b{b}",
                "topology.quorum.dev/rack": f"b{b}-r{r}",
            },
        },
        "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256 % 256}.{i % 256}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"architecture": "amd64", "kubeletVersion": "fake", "operatingSystem": "linux"},
        },
    }


def make_pod(
    i: int,
    *,
    namespace: str,
    name: str,
    node: str = "",
    requests: dict[str, str],
    owner_kind: str = "ReplicaSet",
    owner_name: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "default-scheduler",
) -> dict[str, Any]:
    """A pod shaped like one from the apiserver: containers with resources, owner, status."""
    limits = {k: v for k, v in requests.items() if k != "cpu"}
    bound = bool(node)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(2, i),
            "resourceVersion": str(50_000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "generateName": name.rsplit("-", 1)[0] + "-",
            "labels": {"app.kubernetes.io/name": owner_name or name, "pod-template-hash": f"{i % 97:05x}",
                       **(labels or {})},
            "annotations": {"kubectl.kubernetes.io/default-container": "main", **(annotations or {})},
            "ownerReferences": [
                {"apiVersion": "apps/v1" if owner_kind == "ReplicaSet" else "batch/v1", "kind": owner_kind,
                 "name": owner_name or name, "uid": _uid(3, i // 8), "controller": True,
                 "blockOwnerDeletion": True},
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/team/app:1.2.3",
                    "command": ["/bin/app"],
                    "args": ["--port=8080", f"--shard={i % 64}"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "LOG_LEVEL", "value": "info"}],
                    "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                    "resources": {"requests": dict(requests), "limits": limits},
                    "volumeMounts": [{"name": "kube-api-access", "mountPath":
                                      "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "sidecar",
                    "image": "registry.example/infra/proxy:0.9",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"memory": "128Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "restartPolicy": "Always" if owner_kind == "ReplicaSet" else "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "securityContext": {},
            "schedulerName": scheduler,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                 "tolerationSeconds": 300},
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }
    if bound:
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "10.0.0.1",
            "podIP": f"10.244.{i // 256 % 256}.{i % 256}",
            "startTime": "2025-01-01T00:00:05Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2025-01-01T00:00:05Z"}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [
                {"name": c, "ready": True, "restartCount": 0, "image": "registry.example/x",
                 "imageID": "registry.example/x@sha256:0", "containerID": f"containerd://{i:064x}",
                 "started": True, "state": {"running": {"startedAt": "2025-01-01T00:00:06Z"}}}
                for c in ("main", "sidecar")
            ],
        }
    else:
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return pod


def bound_pod(i: int, node_index: int, slot: int) -> dict[str, Any]:
    """Slot 0 on nodes of even racks holds 4 GPUs; the rest are cpu/memory services."""
    _, r = node_position(node_index)
    requests = {"cpu": "2", "memory": "8Gi"}
    if slot == 0 and r % 2 == 0:
        requests = {"cpu": "8", "memory": "64Gi", GPU: "4"}
    owner = f"svc-{i // 8 % 500}"
    return make_pod(i, namespace=f"team-{i % 20}", name=f"{owner}-{i:06x}", node=node_name(node_index),
                    requests=requests, owner_name=owner)


def gang_pod(i: int, gang: str, member: int, min_count: int = GANG_SIZE) -> dict[str, Any]:
    return make_pod(
        i, namespace="ml", name=f"{gang}-worker-{member}", requests={"cpu": "8", "memory": "64Gi", GPU: "8"},
        owner_kind="Job", owner_name=gang, labels={"job-name": gang},
        annotations={"quorum.dev/gang": gang, "quorum.dev/min-count": str(min_count),
                     "quorum.dev/required-topology": "rack"},
        scheduler="quorum",
    )


def plain_pod() -> dict[str, Any]:
    return make_pod(9_000_000, namespace="team-1", name="web-7d9f-abcde",
                    requests={"cpu": "4", "memory": "16Gi", GPU: "1"}, owner_name="web-7d9f",
                    scheduler="quorum")


class NoopActions:
    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        return None

    async def requeue_pods(self, pods: list[PodRecord], reason: str) -> None:
        return None


class Cluster:
    """Cache + coordinator + the pods the cases send."""

    def __init__(self, nodes: int, pods_per_node: int) -> None:
        # A long bind timeout keeps the benchmark's reservations alive for the whole run.
        self.config = Config(gang=GangTimings(bind_timeout_seconds=86_400.0))
        self.cache = ClusterCache(tuple(level.node_label for level in self.config.levels))
        self.metrics = Metrics()
        self.coordinator = Coordinator(self.config, self.cache, NoopActions(), self.metrics)
        started = time.perf_counter()
        for i in range(nodes):
            self.cache.upsert_node(make_node(i))
        pod_index = 0
        for n in range(nodes):
            for slot in range(pods_per_node):
                self.cache.upsert_pod(bound_pod(pod_index, n, slot))
                pod_index += 1
        self.gang_pods = [[gang_pod(8_000_000 + g * 100 + m, f"train-{g}", m) for m in range(GANG_SIZE)]
                          for g in range(GANGS)]
        self.waiting_pods = [gang_pod(8_100_000 + m, "train-waiting", m) for m in range(WAITING_GANG_PODS)]
        self.nofit_pods = [gang_pod(8_200_000 + m, "train-nofit", m, NOFIT_GANG_SIZE)
                           for m in range(NOFIT_GANG_SIZE)]
        for pod in [p for gang in self.gang_pods for p in gang] + self.waiting_pods + self.nofit_pods:
            self.cache.upsert_pod(pod)
        for kind in self.cache.synced:
            self.cache.synced[kind] = True
        self.build_seconds = time.perf_counter() - started
        self.names = [node_name(i) for i in range(nodes)]
        self.plain = plain_pod()


# Each series: (case, verb, which body). Reservations are made between the (a) and (b) series.
SERIES_BASELINE = [("-", "healthz", "none")]  # GET /healthz: the HTTP round trip with no work
SERIES_BEFORE = [("a", "filter", "plain"), ("a", "prioritize", "plain")]
SERIES_AFTER = [
    ("b", "filter", "plain"),
    ("b", "prioritize", "plain"),
    ("c", "filter", "reserved-member"),
    ("c", "prioritize", "reserved-member"),
    ("d", "filter", "waiting-member"),
    ("e", "filter", "nofit-member"),
]
CASES = {
    "a": "plain pod, no reservations",
    "b": f"plain pod, {GANGS} gangs x {GANG_SIZE} nodes reserved",
    "c": "reserved gang member",
    "d": f"gang member waiting for quorum ({WAITING_GANG_PODS}/{GANG_SIZE})",
    "e": f"member of a gang that fits in no rack ({NOFIT_GANG_SIZE} x 8 GPUs): cached no-fit",
}


# ----------------------------------------------------------------------------------------- stats


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summary_ms(samples_ns: Iterable[int]) -> dict[str, float]:
    values = sorted(s / 1e6 for s in samples_ns)
    return {
        "n": len(values),
        "mean": sum(values) / len(values) if values else float("nan"),
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": values[-1] if values else float("nan"),
    }


class Profiled:
    """cProfile around a block, summarised per request."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()

    def rows(self, requests: int, top: int = 14) -> list[dict[str, Any]]:
        stats = pstats.Stats(self.profile)
        out = []
        for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            where = func if filename == "~" else f"{Path(filename).name}:{line}({func})"
            out.append({"function": where, "calls_per_request": ncalls / requests,
                        "self_us_per_request": tottime / requests * 1e6,
                        "cum_us_per_request": cumtime / requests * 1e6})
        out.sort(key=lambda r: r["self_us_per_request"], reverse=True)
        return out[:top]


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
                conn.send(("ok", _rusage()))
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


def _rusage() -> dict[str, float]:
    import resource

    import psutil

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"minflt": r.ru_minflt, "nvcsw": r.ru_nvcsw, "nivcsw": r.ru_nivcsw,
            "cpu": r.ru_utime + r.ru_stime, "gc": sum(g["collections"] for g in gc.get_stats()),
            "gc_full": gc.get_stats()[-1]["collections"], "rss": psutil.Process().memory_info().rss}


def _per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Per-request averages; garbage collections are totals over the series; RSS at its end."""
    out = {k: (after[k] - before[k]) / requests for k in ("minflt", "nvcsw", "nivcsw")}
    out["cpu_ms"] = (after["cpu"] - before["cpu"]) / requests * 1e3
    out["gc_total"] = after["gc"] - before["gc"]
    out["gc_full_total"] = after["gc_full"] - before["gc_full"]
    out["rss_mib"] = after["rss"] / 2**20
    return out


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
    client_before = _rusage()
    for _ in range(requests):
        w, data, h = client.post(path, body)
        wall.append(w)
        handler.append(h)
    client_after = _rusage()
    parent.send(("rusage",))
    server_after = parent.recv()[1]
    return {"http": summary_ms(wall), "handler": summary_ms(handler),
            "request_bytes": len(body or b""), "response_bytes": len(data),
            "response": describe_response(verb, data),
            "server_rusage": _per_request(server_before, server_after, requests),
            "client_rusage": _per_request(client_before, client_after, requests)}


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
        proc.join(timeout=30)
        if proc.is_alive():
            proc.terminate()
            proc.join()
    return results


def request_bodies(nodes: int) -> dict[str, bytes | None]:
    """Request bodies as kube-scheduler sends them (nodeCacheCapable), built from the same fixtures
    as ``Cluster`` so the pods match the cache; "none" marks the GET baseline."""
    names = [node_name(i) for i in range(nodes)]

    def body(pod: dict[str, Any]) -> bytes:
        return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})

    bodies: dict[str, bytes | None] = {
        "none": None,
        "plain": body(plain_pod()),
        "reserved-member": body(gang_pod(8_000_000 + 1, "train-0", 1)),
        "waiting-member": body(gang_pod(8_100_000, "train-waiting", 0)),
        "nofit-member": body(gang_pod(8_200_000, "train-nofit", 0, NOFIT_GANG_SIZE)),
    }
    for g in range(GANGS):
        bodies[f"gang-{g}-trigger"] = body(gang_pod(8_000_000 + g * 100, f"train-{g}", 0))
    return bodies


# ----------------------------------------------------------------------------------------- in-process


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
            before = _rusage()
            for _ in range(requests):
                a, b, c = once(verb, body)
                parse.append(a)
                decide.append(b)
                encode.append(c)
                total.append(a + b + c)
            after = _rusage()
            out["series"].append({"case": case, "verb": verb, "total": summary_ms(total),
                                  "parse": summary_ms(parse), "coordinator": summary_ms(decide),
                                  "encode": summary_ms(encode),
                                  "rusage": _per_request(before, after, requests)})
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
    result: dict[str, Any] = _in_child(inprocess_main, nodes, pods_per_node, warmup, requests, profile,
                                       profile_requests)
    return result


# ----------------------------------------------------------------------------------------- memory


def _rss() -> int:
    import psutil

    gc.collect()
    return int(psutil.Process().memory_info().rss)


def memory_main(nodes: int, pods: int, keep_full: bool, conn: Any) -> None:
    """Child process: RSS of a cache with ``nodes`` nodes and ``pods`` bound pods."""
    config = Config()
    base = _rss()
    cache = ClusterCache(tuple(level.node_label for level in config.levels))
    for i in range(nodes):
        cache.upsert_node(orjson.loads(orjson.dumps(make_node(i))))
    after_nodes = _rss()
    per_node = max(1, pods // nodes)
    kept: list[dict[str, Any]] = []
    sample_bytes = 0
    for i in range(pods):
        raw = orjson.dumps(bound_pod(i, i // per_node % nodes, i % per_node))
        if i == 0:
            sample_bytes = len(raw)
        obj = orjson.loads(raw)  # what the informer hands the cache
        if keep_full:
            kept.append(obj)
        else:
            cache.upsert_pod(obj)  # the full object is dropped after this
    after_pods = _rss()
    conn.send({"nodes": nodes, "pods": pods, "keep_full": keep_full, "rss_base": base,
               "rss_after_nodes": after_nodes, "rss_after_pods": after_pods,
               "pod_json_bytes": sample_bytes, "cache_pods": len(cache.pods)})


def _in_child(target: Callable[..., None], *args: Any) -> Any:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(*args, child), daemon=True)
    proc.start()
    try:
        result = parent.recv()
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.terminate()
            proc.join()
    return result


# ----------------------------------------------------------------------------------------- report


def machine() -> dict[str, Any]:
    import aiohttp
    import psutil

    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        model = platform.processor()
    return {
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
        "orjson": orjson.__version__,
        "loadavg_1m_at_start": os.getloadavg()[0],
    }


def fmt(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    p = report["params"]
    print(f"\nMachine: {m['cpus']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB RAM, "
          f"{m['implementation']} {m['python']}, aiohttp {m['aiohttp']}, orjson {m['orjson']}")
    print(f"Requests per series: {p['requests']} after {p['warmup']} warm-up; bound pods per node: "
          f"{p['pods_per_node']}. Times in ms.")
    loads = ", ".join(f"{r['loadavg_1m_after']:.1f} after {r['nodes']}" for r in report["runs"])
    print(f"1-minute load average: {m['loadavg_1m_at_start']:.1f} at start, {loads} "
          "(anything else running on the machine shows up in the tails).")
    if p.get("env"):
        print("Environment of the measured processes: " + " ".join(f"{k}={v}" for k, v in p["env"].items()))
    print()
    for key, text in CASES.items():
        print(f"- ({key}) {text}")
    print()
    print("Over HTTP (client wall time per request; handler = server time inside the aiohttp handler):\n")
    print("| nodes | case | verb | p50 | p90 | p99 | max | handler p50 | handler p99 | req KiB | resp KiB |")
    print("|---:|:-:|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in report["runs"]:
        for s in run["http"]["series"]:
            h, srv = s["http"], s["handler"]
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {fmt(h['p50'])} | {fmt(h['p90'])} | "
                  f"{fmt(h['p99'])} | {fmt(h['max'])} | {fmt(srv['p50'])} | {fmt(srv['p99'])} | "
                  f"{s['request_bytes'] / 1024:.0f} | {s['response_bytes'] / 1024:.0f} |")
    print("\nIn process, no HTTP (decode = wire.parse_extender_args, coordinator = Coordinator.filter / "
          "prioritize, encode = response bytes):\n")
    print("| nodes | case | verb | p50 | p90 | p99 | max | decode p50 | coordinator p50 | coordinator p99 "
          "| encode p50 | page faults/req | RSS MiB |")
    print("|---:|:-:|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for run in report["runs"]:
        for s in run["inprocess"]["series"]:
            t = s["total"]
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {fmt(t['p50'])} | {fmt(t['p90'])} | "
                  f"{fmt(t['p99'])} | {fmt(t['max'])} | {fmt(s['parse']['p50'])} | "
                  f"{fmt(s['coordinator']['p50'])} | {fmt(s['coordinator']['p99'])} | "
                  f"{fmt(s['encode']['p50'])} | {s['rusage']['minflt']:.0f} | {s['rusage']['rss_mib']:.0f} |")
    print("\nResource use per HTTP request (getrusage deltas over the measured requests; server CPU includes "
          "aiohttp, client CPU is http.client):\n")
    print("| nodes | case | verb | server CPU ms | server page faults | server ctx switches (vol/invol) "
          "| server GCs (full) in series | server RSS MiB | client CPU ms |")
    print("|---:|:-:|:--|--:|--:|--:|--:|--:|--:|")
    for run in report["runs"]:
        for s in run["http"]["series"]:
            sr, cr = s["server_rusage"], s["client_rusage"]
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {sr['cpu_ms']:.3f} | {sr['minflt']:.0f} | "
                  f"{sr['nvcsw']:.1f} / {sr['nivcsw']:.1f} | {sr['gc_total']} ({sr['gc_full_total']}) | "
                  f"{sr['rss_mib']:.0f} | {cr['cpu_ms']:.3f} |")
    print("\nResponses (last request of each series):\n")
    print("| nodes | case | verb | answer |")
    print("|---:|:-:|:--|:--|")
    for run in report["runs"]:
        for s in run["http"]["series"]:
            answer = ", ".join(f"{k} {v}" for k, v in s["response"].items())
            print(f"| {run['nodes']} | {s['case']} | {s['verb']} | {answer} |")
    print("\nWhole-gang placement (the filter call of each gang's first member, "
          f"{GANG_SIZE} x 8 GPUs, required rack), ms:\n")
    print("| nodes | cache pods | HTTP (each gang) | in-process (each gang) |")
    print("|---:|---:|:--|:--|")
    for run in report["runs"]:
        http_ms = ", ".join(fmt(v) for v in run["http"]["placements_ms"])
        ip_ms = ", ".join(fmt(v) for v in run["inprocess"]["placements_ms"])
        print(f"| {run['nodes']} | {run['http']['pods']} | {http_ms} | {ip_ms} |")
    print_memory(report.get("memory"))
    print_profiles(report)


def print_memory(mem: dict[str, Any] | None) -> None:
    if mem:
        rec, full = mem["records"], mem.get("full")
        print("\nMemory (RSS, psutil, after gc.collect()):\n")
        print("| what | nodes | pods | RSS before | after nodes | after pods | pods cost | per pod |")
        print("|:--|---:|---:|--:|--:|--:|--:|--:|")
        for label, r in (("cache records (upsert_pod)", rec), ("full objects kept (comparison)", full)):
            if not r:
                continue
            cost = r["rss_after_pods"] - r["rss_after_nodes"]
            print(f"| {label} | {r['nodes']} | {r['pods']} | {r['rss_base'] / 2**20:.0f} MiB | "
                  f"{r['rss_after_nodes'] / 2**20:.0f} MiB | {r['rss_after_pods'] / 2**20:.0f} MiB | "
                  f"{cost / 2**20:.0f} MiB | {cost / r['pods']:.0f} B |")
        print(f"\n(one pod object is {rec['pod_json_bytes']} bytes of JSON)")


def print_profiles(report: dict[str, Any]) -> None:
    for run in report["runs"]:
        for where in ("inprocess", "http"):
            profiles = run[where].get("profiles") or {}
            for label, rows in profiles.items():
                print(f"\nProfile {where} {run['nodes']} nodes {label} (cProfile, per request, µs; "
                      "cProfile inflates many small calls):\n")
                print("| function | calls | self µs | cum µs |")
                print("|:--|--:|--:|--:|")
                for r in rows:
                    print(f"| `{r['function']}` | {r['calls_per_request']:.0f} | "
                          f"{r['self_us_per_request']:.0f} | {r['cum_us_per_request']:.0f} |")


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
        http_result = run_http(*common)
        print(f"{nodes} nodes: in-process ...", file=sys.stderr, flush=True)
        inproc = run_inprocess(*common)
        report["runs"].append({"nodes": nodes, "http": http_result, "inprocess": inproc,
                               "loadavg_1m_after": os.getloadavg()[0]})
    if not args.no_memory:
        print("memory ...", file=sys.stderr, flush=True)
        report["memory"] = {
            "records": _in_child(memory_main, args.memory_nodes, args.memory_pods, False),
            "full": _in_child(memory_main, args.memory_nodes, args.memory_pods, True),
        }
    print_report(report)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
