"""``quorum-extender status``: the /debug/gangs document of a real core, formatted (adapters/status.py)."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from extender import cli
from extender.adapters import status

from .test_queue import QueueWorld, claimed_at_once


def kept_off_world() -> tuple[QueueWorld, dict[str, Any]]:
    """ml/big claims a rack; ml/small (later, same priority) is kept off it and fits nowhere else."""
    world, _ = claimed_at_once()
    world.clock.now += 5
    world.group("small", 2, rack=True)
    world.filter("small0")
    return world, world.coordinator.debug_document()


async def test_the_queue_comes_first_in_order_with_claims_and_who_is_kept_off() -> None:
    _, doc = kept_off_world()
    out = io.StringIO()
    status.render(doc, status.selected(doc, None, waiting=False), out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["GANG", "PHASE", "QUEUE"]
    big, small = lines[1], lines[2]
    assert big.startswith("ml/big") and "holds rack b" in big
    assert small.startswith("ml/small") and "kept off (ml/big)" in small
    assert "capacity earmarked for gang ml/big" in small, "the reason kube-scheduler was given"
    assert lines[-1].startswith("claim: capacity earmarked for gang ml/big")


async def test_namespace_and_waiting_filters() -> None:
    _, doc = kept_off_world()
    doc["gangs"].append({"gang": "other/running", "phase": "Bound", "queuePosition": None})
    assert [g["gang"] for g in status.selected(doc, "ml", waiting=False)] == ["ml/big", "ml/small"]
    assert [g["gang"] for g in status.selected(doc, None, waiting=True)] == ["ml/big", "ml/small"]
    assert "other/running" in [g["gang"] for g in status.selected(doc, None, waiting=False)]


async def test_the_command_reads_a_running_server_and_fails_clearly_without_one() -> None:
    _, doc = kept_off_world()

    async def debug_gangs(_: web.Request) -> web.Response:
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get("/debug/gangs", debug_gangs)
    server = TestServer(app)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        out = io.StringIO()
        rc = await asyncio.to_thread(status.main, ["--url", url, "--waiting", "--json"], out)
        assert rc == 0
        shown = json.loads(out.getvalue())
        assert [g["queuePosition"] for g in shown["gangs"]] == [1, 2]
        assert shown["claim"]["gang"] == "ml/big"
        rc = await asyncio.to_thread(cli.main, ["status", "--url", url])
        assert rc == 0
        watched = io.StringIO()
        rc = await asyncio.to_thread(status.main, ["--url", url, "-w", "0.1", "-o", "json"], watched, 2)
        assert rc == 0
        assert watched.getvalue().count("--- ") == 2 and watched.getvalue().count('"gangs"') == 2
    finally:
        await server.close()
    missing = await asyncio.to_thread(status.main, ["--url", url, "--timeout", "1"], io.StringIO())
    assert missing == 1
