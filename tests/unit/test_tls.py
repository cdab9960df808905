"""HTTPS, client verification, certificate names and live reload (adapters/tls.py, server.py),
over real TLS connections on loopback with certificates made by openssl."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from extender.adapters.server import build_app
from extender.adapters.tls import Reloader
from extender.cluster.cache import ClusterCache
from extender.config import Config, ConfigError, TlsSettings, from_mapping
from extender.gang.coordinator import Coordinator
from extender.metrics import Metrics

from ..certs import Pair, Pki, free_port, make_leaf, make_pki
from .fake_apiserver import FakeActions
from .fixtures import LEVEL_LABELS, topology_nodes

pytestmark = pytest.mark.event_loops


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@dataclass
class Served:
    url: str
    reloader: Reloader


async def serve(settings: TlsSettings) -> tuple[Served, web.AppRunner]:
    cache = ClusterCache(LEVEL_LABELS)
    cache.replace_nodes(topology_nodes())
    metrics = Metrics()
    app = build_app(Coordinator(Config(), cache, FakeActions(), metrics), cache, metrics, lambda: True,
                    1 << 20, client_names=settings.client_names)
    reloader = Reloader(settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=reloader.listener).start()
    return Served(f"https://127.0.0.1:{port}", reloader), runner


@pytest.fixture
async def mtls(pki: Pki) -> AsyncIterator[Served]:
    settings = TlsSettings(str(pki.server.cert), str(pki.server.key), str(pki.ca.cert),
                           client_names=("kube-scheduler",))
    served, runner = await serve(settings)
    yield served
    await runner.cleanup()


def client_context(pki: Pki, pair: Pair | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if pair is not None:
        context.load_cert_chain(str(pair.cert), str(pair.key))
    return context


async def call(url: str, context: ssl.SSLContext, path: str = "/filter") -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}{path}", data=b"{}", ssl=context,
                                timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return resp.status


async def test_the_schedulers_certificate_reaches_the_verbs(pki: Pki, mtls: Served) -> None:
    # An empty body is a 400 from the wire decoder: the request got past TLS and the name check.
    assert await call(mtls.url, client_context(pki, pki.scheduler)) == 400


@pytest.mark.parametrize("who", ["none", "stranger"])
async def test_a_client_without_a_certificate_from_the_ca_is_refused_in_the_handshake(
        pki: Pki, mtls: Served, who: str) -> None:
    pair = None if who == "none" else pki.stranger
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await call(mtls.url, client_context(pki, pair))


async def test_a_certificate_of_the_same_ca_with_another_name_may_not_call_the_verbs(
        pki: Pki, mtls: Served) -> None:
    context = client_context(pki, pki.intruder)
    assert await call(mtls.url, context) == 403
    assert await call(mtls.url, context, "/bind") == 403
    async with aiohttp.ClientSession() as session:  # health is not a verb
        async with session.get(f"{mtls.url}/healthz", ssl=context) as resp:
            assert resp.status == 200


def served_subject(url: str, pki: Pki) -> str:
    """The CN of the certificate a new connection is served (no SNI: an IP address)."""
    host, port = url.removeprefix("https://").split(":")
    context = client_context(pki, pki.scheduler)
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=None) as tls:
        cert = tls.getpeercert()
    assert cert is not None
    return next(value for rdn in cert["subject"] for key, value in rdn if key == "commonName")


async def test_rotated_files_are_served_to_the_next_connection_without_a_restart(
        pki: Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(pki.server.cert.read_bytes())
    key.write_bytes(pki.server.key.read_bytes())
    served, runner = await serve(TlsSettings(str(cert), str(key), str(pki.ca.cert)))
    try:
        assert await asyncio.to_thread(served_subject, served.url, pki) == "quorum"
        assert not served.reloader.check(), "nothing changed yet"
        renewed = make_leaf(tmp_path, pki.ca, "quorum-renewed", dns=("localhost",), ips=("127.0.0.1",),
                            serial=2)
        key.write_bytes(b"half-written")  # a rotation caught in the middle keeps the old context
        assert not served.reloader.check()
        assert await asyncio.to_thread(served_subject, served.url, pki) == "quorum"
        cert.write_bytes(renewed.cert.read_bytes())
        key.write_bytes(renewed.key.read_bytes())
        assert served.reloader.check()
        assert await asyncio.to_thread(served_subject, served.url, pki) == "quorum-renewed"
        assert served.reloader.reloads == 1
    finally:
        await runner.cleanup()


def test_tls_configuration_is_checked() -> None:
    ok = from_mapping({"listen": {"port": 8443, "metricsPort": 8080, "metricsHost": "0.0.0.0",
                                  "tls": {"certFile": "c", "keyFile": "k", "clientCAFile": "ca",
                                          "clientNames": ["kube-scheduler"]}}})
    assert ok.tls == TlsSettings("c", "k", "ca", ("kube-scheduler",), 10.0) and ok.metrics_port == 8080
    assert ok.metrics_host == "0.0.0.0"
    bad = [({"tls": {"certFile": "c"}}, "listen.tls.keyFile"),
           ({"tls": {"certFile": "c", "keyFile": "k", "clientNames": ["x"]}}, "clientCAFile"),
           ({"tls": {"certFile": "c", "keyFile": "k", "extra": 1}}, "listen.tls"),
           ({"port": 8080, "metricsPort": 8080}, "listen.metricsPort")]
    for listen, where in bad:
        with pytest.raises(ConfigError, match=where):
            from_mapping({"listen": listen})


async def test_with_a_metrics_port_the_operations_and_the_verbs_are_served_apart() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    cache = ClusterCache(LEVEL_LABELS)
    metrics = Metrics()
    coordinator = Coordinator(Config(), cache, FakeActions(), metrics)
    verbs = build_app(coordinator, cache, metrics, lambda: True, 1 << 20, observability=False)
    ops = build_app(coordinator, cache, metrics, lambda: True, 1 << 20, verbs=False)
    for app, present, absent in ((verbs, ["/healthz"], ["/metrics", "/debug/gangs"]),
                                 (ops, ["/healthz", "/metrics", "/debug/gangs"], [])):
        async with TestClient(TestServer(app)) as client:
            for path in present:
                assert (await client.get(path)).status == 200, path
            for path in absent:
                assert (await client.get(path)).status == 404, path
            filter_status = (await client.post("/filter", data=b"{}")).status
            assert filter_status == (400 if app is verbs else 404)
