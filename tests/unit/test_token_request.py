"""Quorum's own expiring token from the TokenRequest API (``tokenRequest``): asked for with the
pod's token, applied to every later call, asked for again before it expires, kept on a refusal."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from extender.adapters.kube import Credentials, KubeClient
from extender.adapters.token import IssuedToken, TokenRequester, token_requester
from extender.config import ConfigError, TokenRequest, from_mapping


def requester(tmp_path: Path, answers: list[IssuedToken | Exception], refresh: float = 0.0,
              ) -> tuple[TokenRequester, list[str], list[str], list[str]]:
    pod_token = tmp_path / "token"
    pod_token.write_text("pod-token-1\n")
    applied: list[str] = []
    results: list[str] = []
    asked_with: list[str] = []

    async def issue(token: str) -> IssuedToken:
        asked_with.append(token)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return (TokenRequester(str(pod_token), issue, applied.append, refresh, results.append),
            applied, results, asked_with)


async def test_an_issued_token_is_applied_and_asked_for_again_at_four_fifths_of_its_life(
        tmp_path: Path) -> None:
    tokens, applied, results, asked_with = requester(tmp_path, [IssuedToken("mine-1", 3600.0)])
    assert await tokens.refresh() == pytest.approx(2880.0)
    assert applied == ["mine-1"] and results == ["issued"] and asked_with == ["pod-token-1"]


async def test_a_refusal_keeps_the_token_in_use_and_asks_again_soon(tmp_path: Path) -> None:
    tokens, applied, results, _ = requester(tmp_path, [RuntimeError("HTTP 403: forbidden")])
    assert await tokens.refresh() == TokenRequester.RETRY_SECONDS
    assert applied == [] and results == ["failed"] and tokens.issued == 0


async def test_each_ask_uses_the_pods_current_token(tmp_path: Path) -> None:
    tokens, _, _, asked_with = requester(
        tmp_path, [IssuedToken("a", 900.0), IssuedToken("b", 900.0)], refresh=30.0)
    assert await tokens.refresh() == 30.0  # refreshSeconds, when set, wins
    (tmp_path / "token").write_text("pod-token-2")  # the kubelet rotated the pod's token
    await tokens.refresh()
    assert asked_with == ["pod-token-1", "pod-token-2"]


async def test_the_first_token_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TokenRequester, "RETRY_SECONDS", 0.0)
    tokens, applied, results, _ = requester(tmp_path, [OSError("connection refused"),
                                                       IssuedToken("mine", 1000.0)])
    assert await tokens.first() == pytest.approx(800.0)
    assert applied == ["mine"] and results == ["failed", "issued"]
    never, _, _, _ = requester(tmp_path, [OSError("no"), OSError("no")])
    with pytest.raises(RuntimeError, match="no token issued"):
        await never.first(attempts=2)


async def test_over_http_the_pods_token_asks_and_quorums_token_is_sent_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, object]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        seen.append((request.path, request.headers.get("Authorization", ""), body))
        if request.path.endswith("/token"):
            expires = datetime.fromtimestamp(time.time() + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            return web.json_response({"status": {"token": "quorums-own", "expirationTimestamp": expires}},
                                     status=201)
        return web.json_response({}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    server = TestServer(app)
    await server.start_server()
    pod_token = tmp_path / "token"
    pod_token.write_text("schedulers")
    monkeypatch.setattr("extender.adapters.token.IN_CLUSTER_TOKEN", str(pod_token))
    host = str(server.make_url("")).rstrip("/")
    client = KubeClient(Credentials(host, False, {"Authorization": "Bearer schedulers"}))
    results: list[str] = []
    try:
        tokens = token_requester(lambda: client.session, host, TokenRequest("quorum-extender", "q", 900),
                                 client.set_token, results.append)
        delay = await tokens.first()
        await client.write("POST", "/api/v1/namespaces/q/events", b"{}", "application/json")
        await tokens.refresh()  # asked again with the pod's token, not with Quorum's
        await client.write("POST", "/api/v1/namespaces/q/events", b"{}", "application/json")
    finally:
        await client.close()
        await server.close()
    assert 700 < delay < 2900 and results == ["issued", "issued"]
    (ask_path, ask_auth, ask_body), (event_path, event_auth, _), again, after = seen
    assert again[1] == "Bearer schedulers" and after[1] == "Bearer quorums-own"
    assert ask_path == "/api/v1/namespaces/q/serviceaccounts/quorum-extender/token"
    assert ask_auth == "Bearer schedulers"
    assert ask_body == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"expirationSeconds": 900}}
    assert event_path == "/api/v1/namespaces/q/events" and event_auth == "Bearer quorums-own"


def test_token_request_settings_are_checked() -> None:
    config = from_mapping({"tokenRequest": {"serviceAccount": "quorum-extender", "namespace": "q",
                                            "expirationSeconds": 1200, "refreshSeconds": 60}})
    assert config.token_request == TokenRequest("quorum-extender", "q", 1200, 60.0)
    assert from_mapping({}).token_request is None
    chart_default = {"serviceAccount": "q", "namespace": "n", "expirationSeconds": 3600, "refreshSeconds": 0}
    assert from_mapping({"tokenRequest": chart_default}).token_request == TokenRequest("q", "n", 3600, 0.0)
    for bad in ({"namespace": "q"}, {"serviceAccount": "a", "expirationSeconds": 60},
                {"serviceAccount": "a", "refreshSeconds": 4000},
                {"serviceAccount": "a", "refreshSeconds": -1},
                {"serviceAccount": "a", "refreshSeconds": "soon"},
                {"serviceAccount": "a", "audience": "x"}):
        with pytest.raises(ConfigError, match="tokenRequest"):
            from_mapping({"tokenRequest": bad})


