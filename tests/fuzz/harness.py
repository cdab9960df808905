"""Drives fuzzed requests through the real aiohttp app and counts what went wrong.

The app (``build_app`` with a real ``ClusterCache``, ``Coordinator`` and ``Metrics``) listens on
loopback; a minimal HTTP/1.1 client sends each input on a keep-alive connection, which is what
kube-scheduler does and is several times faster than a full client library. Client and server
share one event loop and requests go one at a time, so a request's wall time is also how long it
kept the loop busy: the hang bound is a detector for requests that block, not a latency target.

Per input: the status must not be 5xx, no log record may report an unexpected error, the answer
must pass ``oracle.check``, and the request must finish within the hang bound. Answers the edge
guards had to trim (a core bug the client never sees) are counted apart, as are core invariant
violations (checked every few hundred requests).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from aiohttp import web

from extender.adapters.server import build_app

from . import oracle
from .corpus import VERBS
from .mutate import Mutator
from .world import World, build_world

HANG_BOUND_SECONDS = 1.0
MAX_REQUEST_BYTES = 1 << 20
RELIST_EVERY = 5000  # back to the starting state now and then, so gangs keep being placed
PROGRESS_EVERY = 50_000
_TRIMMED = ("outside the request", "outside 0..", "preempt answer outside")


@dataclass
class Totals:
    inputs: int = 0
    crashes: int = 0  # unexpected exceptions logged by the app or by aiohttp
    server_errors: int = 0  # 5xx answers
    violations: int = 0  # answers outside the protocol
    hangs: int = 0  # requests over the hang bound
    trimmed: int = 0  # core answers the edge guards had to trim
    invariant_violations: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    max_wall: float = 0.0
    max_wall_verb: str = ""
    rss_start: int = 0
    rss_end: int = 0
    objects_start: int = 0  # objects the garbage collector tracks: a leak shows here first
    objects_end: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, kind: str, verb: str, body: bytes, detail: str) -> None:
        if len(self.examples) < 20:
            self.examples.append(f"{kind} on /{verb}: {detail} | input {body[:400]!r}")

    def merge(self, other: Totals) -> None:
        for name in ("inputs", "crashes", "server_errors", "violations", "hangs", "trimmed",
                     "invariant_violations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for status, count in other.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + count
        if other.max_wall > self.max_wall:
            self.max_wall, self.max_wall_verb = other.max_wall, other.max_wall_verb
        self.examples += other.examples[: max(0, 20 - len(self.examples))]

    @property
    def failures(self) -> int:
        return self.crashes + self.server_errors + self.violations + self.hangs


class _LogCounter(logging.Handler):
    """Counts error records (crashes) and edge-guard warnings (trimmed core answers)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.errors = 0
        self.trimmed = 0
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.levelno >= logging.ERROR:
            self.last = f"{record.name}: {message} {record.exc_info[1] if record.exc_info else ''}"
            self.errors += 1
        elif any(marker in message for marker in _TRIMMED):
            self.trimmed += 1
            self.last = message


class Client:
    """HTTP/1.1 over one keep-alive connection; reconnects when the server closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        reader, writer = await self._connection()
        writer.write(head + body)
        answer_head = await reader.readuntil(b"\r\n\r\n")
        lines = answer_head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:] if b": " in line)
        answer = await reader.readexactly(int(headers.get(b"content-length", b"0")))
        if headers.get(b"connection") == b"close":
            await self.close()
        return status, answer


def framing(mutator: Mutator, verb: str, body: bytes) -> tuple[bytes, bytes]:
    """Request head (and body as sent): mostly plain, sometimes another method, chunked transfer,
    no content type, or a declared length over the limit (refused unread)."""
    roll = mutator.rng.random()
    path = f"/{verb}"
    base = "Host: quorum\r\n"
    if roll < 0.01:
        method = mutator.rng.choice(["GET", "PUT", "DELETE", "PATCH"])
        return f"{method} {path} HTTP/1.1\r\n{base}Content-Length: {len(body)}\r\n\r\n".encode(), body
    if roll < 0.02:
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 700]), body[i:i + 700])
                          for i in range(0, len(body), 700))
        head = f"POST {path} HTTP/1.1\r\n{base}Transfer-Encoding: chunked\r\n\r\n".encode()
        return head, chunks + b"0\r\n\r\n"
    if roll < 0.025:
        head = f"POST {path} HTTP/1.1\r\n{base}Content-Length: {10 * 10**9}\r\n\r\n".encode()
        return head, body[:1024]
    content_type = "" if roll < 0.03 else "Content-Type: application/json\r\n"
    return f"POST {path} HTTP/1.1\r\n{base}{content_type}Content-Length: {len(body)}\r\n\r\n".encode(), body


class Harness:
    def __init__(self, seed: int | str) -> None:
        self.mutator = Mutator(seed)
        self.world: World = build_world()
        self.totals = Totals()
        self.logs = _LogCounter()
        self._runner: web.AppRunner | None = None
        self._problems: set[str] = set()
        self.client: Client | None = None

    async def start(self) -> None:
        world = self.world
        app = build_app(world.coordinator, world.cache, world.metrics, lambda: True, MAX_REQUEST_BYTES)
        # No lingering after a refusal: the client never sends the rest of a refused body.
        self._runner = web.AppRunner(app, access_log=None, lingering_time=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.client = Client(host, port)
        logging.getLogger().addHandler(self.logs)

    async def stop(self) -> None:
        logging.getLogger().removeHandler(self.logs)
        if self.client is not None:
            await self.client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def one(self, verb: str, body: bytes | None = None) -> None:
        assert self.client is not None
        totals, logs = self.totals, self.logs
        if body is None:
            body = self.mutator.body(verb)
        head, sent = framing(self.mutator, verb, body)
        errors, trimmed = logs.errors, logs.trimmed
        started = time.perf_counter()
        try:
            status, answer = await asyncio.wait_for(self.client.request(head, sent), 30)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError) as exc:
            await self.client.close()
            status, answer = 0, b""
            totals.hangs += isinstance(exc, TimeoutError)
            totals.crashes += not isinstance(exc, TimeoutError)
            totals.note("no answer", verb, body, repr(exc))
        wall = time.perf_counter() - started
        totals.inputs += 1
        totals.statuses[status] = totals.statuses.get(status, 0) + 1
        if wall > totals.max_wall:
            totals.max_wall, totals.max_wall_verb = wall, verb
        if wall > HANG_BOUND_SECONDS:
            totals.hangs += 1
            totals.note("hang", verb, body, f"{wall:.2f}s")
        if status >= 500:
            totals.server_errors += 1
            totals.note("5xx", verb, body, answer[:200].decode(errors="replace"))
        elif status:
            problems = oracle.check(verb, body, status, answer)
            if problems:
                totals.violations += 1
                totals.note("protocol", verb, body, "; ".join(problems))
        if logs.errors != errors:
            totals.crashes += 1
            totals.note("crash", verb, body, logs.last)
        if logs.trimmed != trimmed:
            totals.trimmed += 1
            totals.note("trimmed", verb, body, logs.last)

    def _checkpoint(self, verb: str, body: bytes) -> None:
        """Core invariants after every input (about 30 us); a new violation is put down to it."""
        problems = set(self.world.coordinator.check_invariants())
        new, self._problems = problems - self._problems, problems
        if new:
            self.totals.invariant_violations += 1
            self.totals.note("invariant", verb, body, "; ".join(sorted(new))[:300])
        if self.totals.inputs % RELIST_EVERY == 0:
            self.world.relist()

    async def run(self, count: int, verbs: tuple[str, ...] = VERBS, warmup: int = 2000,
                  progress: Callable[[Totals], None] | None = None) -> Totals:
        """``count`` inputs spread evenly over ``verbs``; RSS is taken after ``warmup`` inputs."""
        process = psutil.Process(os.getpid())
        for i in range(count):
            if i == min(warmup, count // 2):
                gc.collect()
                self.totals.rss_start = process.memory_info().rss
                self.totals.objects_start = len(gc.get_objects())
            verb = verbs[i % len(verbs)]
            body = self.mutator.body(verb)
            await self.one(verb, body)
            self._checkpoint(verb, body)
            if progress is not None and self.totals.inputs % PROGRESS_EVERY == 0:
                progress(self.totals)
        gc.collect()
        self.totals.rss_end = process.memory_info().rss
        self.totals.objects_end = len(gc.get_objects())
        return self.totals


async def fuzz(seed: int | str, count: int, verbs: tuple[str, ...] = VERBS, warmup: int = 2000,
               progress: Callable[[Totals], None] | None = None) -> Totals:
    harness = Harness(seed)
    await harness.start()
    try:
        return await harness.run(count, verbs, warmup, progress)
    finally:
        await harness.stop()


def describe(totals: Totals) -> dict[str, Any]:
    return {
        "inputs": totals.inputs,
        "crashes": totals.crashes,
        "5xx": totals.server_errors,
        "protocol violations": totals.violations,
        "hangs": totals.hangs,
        "core answers trimmed at the edge": totals.trimmed,
        "core invariant violations": totals.invariant_violations,
        "statuses": dict(sorted(totals.statuses.items())),
        "max request wall (s)": round(totals.max_wall, 4),
        "memory growth (MiB)": round((totals.rss_end - totals.rss_start) / 2**20, 2),
        "tracked objects growth": totals.objects_end - totals.objects_start,
    }
