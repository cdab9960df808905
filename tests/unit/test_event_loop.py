"""The event loop Quorum runs on (``extender.adapters.event_loop``): the standard loop by default,
uvloop on request, a clear exit for anything else; the standard loop's TLS read buffers; and the
``event_loops`` mark really runs a test on both."""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from pathlib import Path
from unittest.mock import patch

import aiohttp
import pytest
import uvloop
from aiohttp import web

from extender.adapters.event_loop import ENVIRONMENT_VARIABLE, TLS_READ_BYTES, chosen_loop, new_event_loop

from ..certs import Pki, free_port, make_pki
from .test_config import _run


def test_the_standard_loop_unless_uvloop_is_asked_for() -> None:
    assert chosen_loop({}) == "asyncio"
    assert chosen_loop({ENVIRONMENT_VARIABLE: ""}) == "asyncio"
    assert chosen_loop({ENVIRONMENT_VARIABLE: "uvloop"}) == "uvloop"


def test_an_unknown_loop_is_refused_naming_the_variable_and_the_choices() -> None:
    expected = f"{ENVIRONMENT_VARIABLE} must be one of asyncio, uvloop, got 'trio'"
    with pytest.raises(ValueError, match=expected):
        chosen_loop({ENVIRONMENT_VARIABLE: "trio"})


@pytest.mark.parametrize(("kind", "loop_type"), [("uvloop", uvloop.Loop),
                                                  ("asyncio", asyncio.SelectorEventLoop)])
def test_each_choice_makes_its_own_loop(kind: str, loop_type: type) -> None:
    loop = new_event_loop(kind)
    try:
        assert type(loop) is loop_type
    finally:
        loop.close()


def test_the_process_exits_2_for_an_unknown_loop() -> None:
    result = _run(env={ENVIRONMENT_VARIABLE: "trio"})
    assert result.returncode == 2, result.stderr
    assert f"{ENVIRONMENT_VARIABLE} must be one of asyncio, uvloop" in result.stderr


@pytest.mark.event_loops
async def test_the_mark_runs_a_test_on_each_loop(request: pytest.FixtureRequest) -> None:
    expected = uvloop.Loop if "uvloop" in request.node.callspec.id else asyncio.SelectorEventLoop
    assert type(asyncio.get_running_loop()) is expected


def _echo_over_tls(pki: Pki, body: bytes) -> tuple[bytes, list[int]]:
    """POST ``body`` to an echo server over TLS, both ends on a loop made by ``new_event_loop``;
    the echoed body, and the read buffer sizes of the TLS connections open meanwhile."""
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    async def round_trip() -> tuple[bytes, list[int]]:
        app = web.Application(client_max_size=len(body) + 1)
        app.router.add_post("/", echo)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        listener = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        listener.load_cert_chain(pki.server.cert, pki.server.key)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=listener).start()
        opened: list[int] = []
        real_init = sslproto.SSLProtocol.__init__

        def noting_init(self: sslproto.SSLProtocol, *args: object, **kwargs: object) -> None:
            real_init(self, *args, **kwargs)  # type: ignore[arg-type]
            opened.append(len(self._ssl_buffer))  # type: ignore[attr-defined]
        try:
            with patch.object(sslproto.SSLProtocol, "__init__", noting_init):
                connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=str(pki.ca.cert)))
                async with aiohttp.ClientSession(connector=connector) as session, \
                        session.post(f"https://127.0.0.1:{port}/", data=body) as resp:
                    return await resp.read(), opened
        finally:
            await runner.cleanup()

    loop = new_event_loop("asyncio")
    try:
        return loop.run_until_complete(round_trip())
    finally:
        loop.close()


def test_the_standard_loop_reads_tls_in_small_buffers_and_loses_nothing(tmp_path: Path) -> None:
    """A connection's read buffer is TLS_READ_BYTES, not asyncio's 256 KiB, both for what Quorum
    serves and what it asks; a body many buffers long still arrives whole, both ways."""
    body = bytes(range(256)) * (3 * TLS_READ_BYTES // 256 + 7)
    echoed, buffers = _echo_over_tls(make_pki(tmp_path), body)
    assert echoed == body
    assert buffers == [TLS_READ_BYTES, TLS_READ_BYTES]  # the client's connection and the server's
