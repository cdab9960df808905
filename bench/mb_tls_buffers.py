#!/usr/bin/env python3
"""Resident memory and CPU of many TLS requests held open at once, by TLS read buffer size.

    python bench/mb_tls_buffers.py [--sizes 262144,65536] [--held 256] [--reps 2]

The burst that a 256-pod gang brings: kube-scheduler's held bind calls, each on a new TLS
connection. One aiohttp server and one client in a child process per run (the buffer size is
process-wide, ``extender.adapters.event_loop.limit_tls_reads``); the client opens ``--held``
requests at once, the server holds them all for 2 s and then answers. Printed per run: resident
memory before, at the peak (all held) and 0.5 s after the answers, and the process's CPU time.
Then one 50 MiB body four times through one connection, for the cost of small reads on a large
transfer. The sizes run interleaved, ``--reps`` times each; it only measures and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cb_procs import rss_mib  # after the path: cb_procs imports its siblings by name

LARGE_BODY = 50 * 2**20


def make_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "server.pem", directory / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return cert, key


async def one_run(cert: Path, key: Path, held: int) -> dict[str, float]:
    import aiohttp
    from aiohttp import web

    release = asyncio.Event()

    async def hold(request: web.Request) -> web.Response:
        await request.read()
        await release.wait()
        return web.json_response({"ok": True})

    async def large(_: web.Request) -> web.Response:
        return web.Response(body=b"y" * LARGE_BODY)

    app = web.Application()
    app.router.add_post("/hold", hold)
    app.router.add_get("/large", large)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    listener = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    listener.load_cert_chain(cert, key)
    site = web.TCPSite(runner, "localhost", 0, ssl_context=listener)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client_tls = ssl.create_default_context(cafile=str(cert))
    figures = {"rss_before": rss_mib(os.getpid())}
    cpu = time.process_time()
    connector = aiohttp.TCPConnector(ssl=client_tls, limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def call() -> None:
            async with session.post(f"https://localhost:{port}/hold", data=b"x" * 3000) as resp:
                await resp.read()
        calls = [asyncio.create_task(call()) for _ in range(held)]
        await asyncio.sleep(2)
        figures["rss_peak"] = rss_mib(os.getpid())
        release.set()
        await asyncio.gather(*calls)
    await asyncio.sleep(0.5)
    figures["rss_after"] = rss_mib(os.getpid())
    figures["held_cpu_s"] = time.process_time() - cpu
    cpu = time.process_time()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as session:
        for _ in range(4):
            async with session.get(f"https://localhost:{port}/large") as resp:
                async for _chunk in resp.content.iter_chunked(65536):
                    pass
    figures["large_cpu_s"] = time.process_time() - cpu
    await runner.cleanup()
    return figures


def child(size: int, held: int, cert: Path, key: Path) -> None:
    from extender.adapters.event_loop import limit_tls_reads

    limit_tls_reads(size)
    print(json.dumps(asyncio.run(one_run(cert, key, held))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="262144,65536", help="read buffer sizes in bytes, comma-separated")
    parser.add_argument("--held", type=int, default=256, help="requests held open at once")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--cert", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--key", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.held, args.cert, args.key)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| buffer | rep | RSS MiB before | peak | 0.5 s after | CPU s, held requests | CPU s, 4 × 50 MiB |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = make_certificate(Path(tmp))
        for rep in range(args.reps):
            for size in sizes if rep % 2 == 0 else reversed(sizes):
                command = [sys.executable, __file__, "--child", str(size), "--held", str(args.held),
                           "--cert", str(cert), "--key", str(key)]
                out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
                f = json.loads(out.strip().splitlines()[-1])
                print(f"| {size // 1024} KiB | {rep} | {f['rss_before']:.1f} | {f['rss_peak']:.1f} | "
                      f"{f['rss_after']:.1f} | {f['held_cpu_s']:.2f} | {f['large_cpu_s']:.2f} |")


if __name__ == "__main__":
    main()
