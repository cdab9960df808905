"""bench/cb_kube.py: a busy apiserver's dropped answers are asked again, not the end of a run."""

from __future__ import annotations

import asyncio

import aiohttp

from .bench_modules import bench_module

cb_kube = bench_module("cb_kube")

CUT_SHORT = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"kind\""
WHOLE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"kind\":\"ok\"}"


async def test_an_answer_cut_short_is_asked_again() -> None:
    """A deletecollection of thousands of pods on a saturated apiserver once ended part-way
    through its body (``ClientPayloadError``) and stopped a whole comparison."""
    answers = [CUT_SHORT, WHOLE]
    asked = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answers.pop(0))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    api = object.__new__(cb_kube.Apiserver)
    api.base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session, server:
        api._session = session
        assert await api.request("DELETE", "/api/v1/namespaces/x/pods", ok=(200,)) == {"kind": "ok"}
    assert len(asked) == 2
