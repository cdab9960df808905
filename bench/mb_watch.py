#!/usr/bin/env python3
"""CPU that reading a watch costs Quorum's client, per event, without the cache behind it.

    PYTHONPATH=<checkout> python bench/mb_watch.py [--events 20000] [--rate 2000]

A server process streams ``--events`` pod watch events (a Running pod with its managedFields, about
3.1 KB, as the apiserver sends them) over plain HTTP, one chunk per event at ``--rate`` a second,
so that each event arrives in a read of its own as on a cluster that is not flooding the watch.
This process reads them through ``KubeClient.watch`` and prints its own CPU time (user + system)
per event: the HTTP parsing, the stream, the JSON decoding and whatever the client does per chunk.
TLS is left out (the same for every revision). Compare revisions by running it from two checkouts
in turn, interleaved (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import time
from typing import Any

PATH = "/api/v1/pods"


def pod_event(i: int) -> bytes:
    """One MODIFIED event of a Running gang member as the apiserver encodes it."""
    fields = {"f:metadata": {"f:annotations": {".": {}, "f:quorum.dev/gang": {}}, "f:labels": {".": {}}},
              "f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}, "f:resources": {}}}}}
    condition = {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
    status = {"f:status": {"f:conditions": {f'k:{{"type":"{t}"}}': condition for t in
                                            ("ContainersReady", "Initialized", "PodScheduled", "Ready")},
                           "f:containerStatuses": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}
    managed = [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": "2026-12-07T10:00:00Z",
                "fieldsType": "FieldsV1", "fieldsV1": f} for m, f in
               (("python", fields), ("kube-scheduler", status), ("kwok", status))]
    pod = {
        "metadata": {"uid": f"uid-{i:08d}", "namespace": "bench", "name": f"g{i // 16}-m{i % 16}",
                     "resourceVersion": str(1000 + i), "creationTimestamp": "2026-12-07T10:00:00Z",
                     "labels": {"app": "bench"}, "annotations": {"quorum.dev/gang": f"g{i // 16}",
                                                                 "quorum.dev/min-count": "16"},
                     "managedFields": managed},
        "spec": {"nodeName": f"kwok-b0-r0-n{i % 20}", "schedulerName": "quorum",
                 "containers": [{"name": "c", "image": "fake", "resources": {"requests": {"cpu": "8"}},
                                 "terminationMessagePath": "/dev/termination-log"}],
                 "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                 "restartPolicy": "Never", "priority": 0},
        "status": {"phase": "Running", "podIP": "10.0.1.2", "startTime": "2026-12-07T10:00:01Z",
                   "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-07T10:00:01Z"}
                                  for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                   "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "fake",
                                          "state": {"running": {"startedAt": "2026-12-07T10:00:01Z"}}}]},
    }
    return json.dumps({"type": "MODIFIED", "object": pod}).encode() + b"\n"


def serve(sock: socket.socket, events: int, rate: float) -> None:
    """Child process: answer each watch with ``events`` events, paced."""
    from aiohttp import web

    lines = [pod_event(i) for i in range(events)]

    async def watch(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        started = time.monotonic()
        for i, line in enumerate(lines):
            await response.write(line)
            ahead = started + (i + 1) / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        return response

    app = web.Application()
    app.router.add_get(PATH, watch)
    web.run_app(app, sock=sock, print=None, handle_signals=False)


async def read_all(url: str) -> tuple[int, float, float]:
    """Events read, CPU seconds and wall seconds of this process while reading them."""
    from extender.adapters.kube import Credentials, KubeClient

    client = KubeClient(Credentials(url, False, {}))
    try:
        count, cpu, wall = 0, time.process_time(), time.monotonic()
        async for _event in client.watch(PATH, "1"):
            count += 1
        return count, time.process_time() - cpu, time.monotonic() - wall
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=2_000.0, help="events a second the server sends")
    args = p.parse_args(argv)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server: Any = mp.get_context("spawn").Process(target=serve, args=(sock, args.events, args.rate),
                                                  daemon=True)
    server.start()
    try:
        time.sleep(1.0)  # the server builds its events
        count, cpu, wall = asyncio.run(read_all(f"http://127.0.0.1:{sock.getsockname()[1]}"))
    finally:
        server.kill()
    if count != args.events:
        print(f"read {count} of {args.events} events")
        return 1
    print(f"{count} events at {count / wall:.0f}/s: {cpu / count * 1e6:.1f} µs of CPU per event read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
