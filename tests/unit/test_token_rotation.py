"""A rotated ServiceAccount token is picked up without a restart (projected tokens expire)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from extender.adapters.token import TokenFile, read_token

from .fixtures import kube_world


def test_a_new_token_in_the_file_is_applied_once(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    applied: list[str] = []
    tokens = TokenFile(str(path), read_token(str(path)), applied.append)
    assert tokens.current == "first"
    assert not tokens.check(read_token(str(path)))  # unchanged: nothing to do
    path.write_text("second\n")  # the kubelet's rotation
    assert tokens.check(read_token(str(path)))
    assert not tokens.check(read_token(str(path)))
    assert applied == ["second"]


def test_an_unreadable_or_empty_file_keeps_the_token_in_use(tmp_path: Path) -> None:
    path = tmp_path / "token"
    applied: list[str] = []
    tokens = TokenFile(str(path), "in-use", applied.append)
    assert read_token(str(path)) is None  # missing
    path.write_text("  \n")
    assert not tokens.check(read_token(str(path)))  # empty
    assert applied == [] and tokens.current == "in-use"


async def test_the_loop_rereads_the_file_and_the_client_sends_the_new_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    async with kube_world() as c:
        c.client.set_token("first")
        tokens = TokenFile(str(path), "first", c.client.set_token, interval=0.01)
        task = asyncio.ensure_future(tokens.run())
        try:
            await c.client.write("POST", "/api/v1/namespaces/ml/events", b"{}", "application/json")
            path.write_text("second")
            for _ in range(200):
                if tokens.rotations:
                    break
                await asyncio.sleep(0.01)
            await c.client.write("POST", "/api/v1/namespaces/ml/events", b"{}", "application/json")
        finally:
            task.cancel()
    assert [r.authorization for r in c.api.requests] == ["Bearer first", "Bearer second"]
