"""Quorum's HTTP server on uvloop against the standard asyncio loop, side by side.

Two server processes serve ``build_app`` on the same synthetic cluster (bench/mb_cluster.py), one
per loop. Rounds alternate between them (the order flips every round) and measure the server
process's CPU (utime + stime from /proc) per request for:

  filter     a plain pod's filter call over one keep-alive connection, kube-scheduler's
             nodeCacheCapable form with every node's name (the request and answer Quorum sees most)
  connect    a GET /healthz on a new connection each time, closed after the answer: what every held
             bind call costs beyond its handler when kube-scheduler (two idle connections kept per
             extender) opens a connection for it

    python bench/mb_loop.py [--nodes 1000] [--requests 2000] [--rounds 6]

Prints one line per round and loop, then the medians and the uvloop/asyncio ratio per series.
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

LOOPS = ("asyncio", "uvloop")
TICKS = os.sysconf("SC_CLK_TCK")


def serve(kind: str, nodes: int) -> None:
    """Child: Quorum's app on the synthetic cluster, on the loop named; prints its port."""
    from aiohttp import web
    from mb_cluster import Cluster

    from extender.adapters.event_loop import new_event_loop
    from extender.adapters.server import build_app

    cluster = Cluster(nodes, 10)
    app = build_app(cluster.coordinator, cluster.cache, cluster.metrics, lambda: True,
                    cluster.config.max_request_bytes)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    web.run_app(app, sock=sock, access_log=None, print=None, loop=new_event_loop(kind))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _request(method: str, path: str, body: bytes) -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def _read_answer(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError("server closed the connection")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(1 << 16)
    return body


def filter_series(port: int, body: bytes, requests: int) -> None:
    message = _request("POST", "/filter", body)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for _ in range(requests):
            sock.sendall(message)
            _read_answer(sock)


def connect_series(port: int, requests: int) -> None:
    message = _request("GET", "/healthz", b"")
    for _ in range(requests):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(message)
            _read_answer(sock)


def measure(pid: int, run: Callable[[], None], requests: int) -> float:
    """Server CPU microseconds per request of one series."""
    before = cpu_seconds(pid)
    run()
    return (cpu_seconds(pid) - before) * 1e6 / requests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--serve", choices=LOOPS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.nodes)
        return 0
    from mb_cluster import request_bodies

    body = request_bodies(args.nodes)["plain"] or b""
    servers = {kind: subprocess.Popen([sys.executable, __file__, "--serve", kind, "--nodes", str(args.nodes)],
                                      stdout=subprocess.PIPE, text=True) for kind in LOOPS}
    try:
        ports = {kind: int(proc.stdout.readline()) for kind, proc in servers.items()}  # type: ignore[union-attr]
        time.sleep(1.0)
        for kind in LOOPS:  # warm up
            filter_series(ports[kind], body, 200)
            connect_series(ports[kind], 200)
        results: dict[tuple[str, str], list[float]] = {}
        for rnd in range(args.rounds):
            order = LOOPS if rnd % 2 == 0 else LOOPS[::-1]
            for kind in order:
                pid, port = servers[kind].pid, ports[kind]
                f = measure(pid, functools.partial(filter_series, port, body, args.requests), args.requests)
                c = measure(pid, functools.partial(connect_series, port, args.requests), args.requests)
                results.setdefault((kind, "filter"), []).append(f)
                results.setdefault((kind, "connect"), []).append(c)
                print(f"round {rnd} {kind:<8} filter {f:6.0f} us/request  connect {c:6.0f} us/request",
                      flush=True)
        print(f"\n{args.nodes} nodes, {args.requests} requests a series, {args.rounds} rounds, "
              f"server CPU per request (median of rounds):")
        for series in ("filter", "connect"):
            medians = {kind: statistics.median(results[(kind, series)]) for kind in LOOPS}
            print(f"  {series:<8} asyncio {medians['asyncio']:6.0f} us  uvloop {medians['uvloop']:6.0f} us  "
                  f"uvloop/asyncio {medians['uvloop'] / medians['asyncio']:.2f}")
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
