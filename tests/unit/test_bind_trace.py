"""bench/bind_trace.py splits a gang's bind skew into Quorum's sending and the apiserver's answering
(docs/benchmarks.md, "The bind skew"): it must trace bindings and nothing else, and its per-gang
spreads must be the ones its input says."""

from __future__ import annotations

import io

import aiohttp
import orjson
from aiohttp import web

from .bench_modules import bench_module

bind_trace = bench_module("bind_trace")


def test_binding_urls_are_recognised_and_nothing_else() -> None:
    assert bind_trace.binding_of("https://h:6443/api/v1/namespaces/ml/pods/g1-3/binding") == ("ml", "g1-3")
    assert bind_trace.binding_of("/api/v1/namespaces/ml/pods/g1-3/binding?timeout=5s") == ("ml", "g1-3")
    assert bind_trace.binding_of("/api/v1/namespaces/ml/pods/g1-3") is None
    assert bind_trace.binding_of("/api/v1/namespaces/ml/pods/g1-3/status") is None


async def _created(_request: web.Request) -> web.Response:
    return web.json_response({}, status=201)


async def _listed(_request: web.Request) -> web.Response:
    return web.json_response({"items": []})


async def test_each_binding_is_traced_once_with_its_connection_and_nothing_else_is() -> None:
    app = web.Application()
    app.router.add_post("/api/v1/namespaces/{ns}/pods/{name}/binding", _created)
    app.router.add_get("/api/v1/pods", _listed)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sink = io.StringIO()
    try:
        async with aiohttp.ClientSession(trace_configs=[bind_trace.tracing(sink)]) as session:
            base = f"http://127.0.0.1:{port}"
            for name in ("g1-0", "g1-1"):
                async with session.post(f"{base}/api/v1/namespaces/ml/pods/{name}/binding", data=b"{}") as r:
                    assert r.status == 201
            async with session.get(f"{base}/api/v1/pods") as r:
                assert r.status == 200
    finally:
        await runner.cleanup()
    rows = [orjson.loads(line) for line in sink.getvalue().splitlines()]
    assert [(r["namespace"], r["pod"], r["status"]) for r in rows] == [("ml", "g1-0", 201),
                                                                       ("ml", "g1-1", 201)]
    assert ["opened" in r for r in rows] == [True, False]  # the second reused the first's connection
    for r in rows:
        assert r["start"] <= r["sent"] <= r["end"]


def test_gang_spreads_separate_sending_from_answering() -> None:
    trace = [{"namespace": "ml", "pod": f"g{g}-{m}", "start": 0.0, "sent": 10.0 + 0.001 * m * (g + 1)}
             for g in range(2) for m in range(4)]
    # g0-0 again, from a later run: its last binding counts
    trace.append({"namespace": "ml", "pod": "g0-0", "start": 0.0, "sent": 9.999, "opened": 9.998})
    received = {f"g{g}-{m}": 10.01 + 0.01 * m for g in range(2) for m in range(4)}
    completed = {f"g0-{m}": 10.05 + 0.1 * m for m in range(4)} | {f"g1-{m}": 10.05 for m in range(4)}
    rows = bind_trace.gang_rows(trace, completed, received)
    assert [r.gang for r in rows] == ["g0", "g1"]  # the worst completed spread first
    worst, best = rows
    assert worst.bindings == 4 and worst.opened == 1
    assert round(worst.sent_ms, 3) == 4.0  # 9.999 (the later run's g0-0) to 10.003
    assert round(best.sent_ms, 3) == 6.0
    assert round(worst.received_ms) == round(best.received_ms) == 30
    assert round(worst.completed_ms) == 300 and round(best.completed_ms) == 0
    assert [round(v) for v in worst.in_apiserver_ms] == [40, 310]
    text = bind_trace.report(rows, [40.0, 310.0])
    assert "| g0 | 4.0 | 30 | 300 | 40 / 310 | 1 |" in text
