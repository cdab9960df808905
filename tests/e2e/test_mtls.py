"""kube-scheduler calls Quorum over mutual TLS, and nobody else may.

A second Quorum serves HTTPS and requires client certificates from a test CA naming
``kube-scheduler`` (``listen.tls``), with ``/metrics`` and ``/debug`` on a plain port of their own
(``listen.metricsPort``). A second kube-scheduler from the same binary runs a profile
``quorum-tls`` whose extender has ``enableHTTPS`` and a ``tlsConfig`` with the client certificate,
key, CA and server name. A gang of that profile binds whole through it. Then, straight at the
verbs' port: a client with no certificate, or one from another CA, fails the handshake, and a
certificate of the right CA naming another client gets 403. With client verification off the
first check fails (the handshake succeeds).
"""

from __future__ import annotations

import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..certs import Pair, Pki, free_port, make_pki
from .cluster import Quorum
from .pairs import Launcher, verb_calls, wait_ready
from .scenario import Scenario

pytestmark = pytest.mark.e2e

PROFILE = "quorum-tls"


@dataclass
class TlsPair:
    """The second Quorum and kube-scheduler, and the certificates around them."""

    pki: Pki
    verbs_port: int
    ops: Quorum


@pytest.fixture
def tls_pair(scenario: Scenario) -> Iterator[TlsPair]:
    with tempfile.TemporaryDirectory(prefix="quorum-mtls-") as tmp:
        root = Path(tmp)
        launcher = Launcher.from_local(root)
        if isinstance(launcher, str):
            pytest.skip(f"needs the local cluster's processes: {launcher}")
        pki = make_pki(root)
        verbs_port, ops_port = free_port(), free_port()
        tls = {"certFile": str(pki.server.cert), "keyFile": str(pki.server.key),
               "clientCAFile": str(pki.ca.cert), "clientNames": ["kube-scheduler"]}
        try:
            launcher.start_quorum("mtls-quorum", verbs_port, {
                "listen": {"metricsPort": ops_port, "tls": tls},
                "schedulerNames": [PROFILE], "preemption": {"enabled": False}})
            ops = Quorum(f"http://127.0.0.1:{ops_port}")
            wait_ready(ops, "the mTLS Quorum")
            launcher.start_scheduler("mtls-kube-scheduler", free_port(), PROFILE, {
                "urlPrefix": f"https://127.0.0.1:{verbs_port}", "enableHTTPS": True,
                "tlsConfig": {"certFile": str(pki.scheduler.cert), "keyFile": str(pki.scheduler.key),
                              "caFile": str(pki.ca.cert), "serverName": "localhost"}})
            yield TlsPair(pki, verbs_port, ops)
        finally:
            launcher.stop()


def tls_call(pair: TlsPair, client: Pair | None, path: str = "/filter") -> int:
    context = ssl.create_default_context(cafile=str(pair.pki.ca.cert))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    request = urllib.request.Request(f"https://localhost:{pair.verbs_port}{path}", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def refused_in_handshake(pair: TlsPair, client: Pair | None) -> bool:
    try:
        tls_call(pair, client)
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        return True
    return False


def test_kube_scheduler_binds_a_gang_through_quorum_over_mtls_and_nobody_else_gets_in(
        scenario: Scenario, tls_pair: TlsPair) -> None:
    sc, topo = scenario, scenario.topo
    if topo.shortfall(nodes_per_rack=2):
        pytest.skip(topo.shortfall(nodes_per_rack=2) or "")
    size = topo.nodes_per_rack
    members = sc.gang("tls", size, gpus=topo.gpus_per_node, required="rack", create=False)
    for manifest in members:
        manifest["spec"]["schedulerName"] = PROFILE
    names = sc.create(members)
    placed = sc.wait_bound(names, timeout=90, what=f"the gang bound by the {PROFILE} scheduler over mTLS")
    assert len({topo.rack_of(n) for n in placed.values()}) == 1
    binds = tls_pair.ops.metric("quorum_request_duration_seconds_count", verb="bind", outcome="ok")
    filters = verb_calls(tls_pair.ops, "filter")
    assert binds >= size and filters >= 1, "the verbs were answered by the mTLS Quorum"

    assert refused_in_handshake(tls_pair, None), "a client without a certificate is refused"
    assert refused_in_handshake(tls_pair, tls_pair.pki.stranger), "a certificate of another CA is refused"
    assert tls_call(tls_pair, tls_pair.pki.intruder) == 403, "only the scheduler's certificate may call verbs"
    assert tls_call(tls_pair, tls_pair.pki.intruder, "/bind") == 403
    assert tls_call(tls_pair, tls_pair.pki.scheduler) == 400, "the scheduler's certificate reaches the verbs"
    sc.record("mtls", {"binds": binds, "filters": filters})
    sc.finish()
