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
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from ..certs import Pair, Pki, free_port, make_pki
from .cluster import REPO_ROOT, Quorum, wait
from .process import LocalProcess, config_of
from .reconfigure import merged
from .scenario import Scenario

pytestmark = pytest.mark.e2e

PROFILE = "quorum-tls"
PIDS = REPO_ROOT / ".cache" / "cluster" / "pids"


@dataclass
class TlsPair:
    """The second Quorum and kube-scheduler, and the certificates around them."""

    pki: Pki
    verbs_port: int
    ops: Quorum
    logs: Path


def _argv_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def start(argv: list[str], log: Path, cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def quorum_command(quorum: LocalProcess, config: Path, port: int) -> list[str]:
    """The local Quorum's interpreter and credentials; the port as a flag, since the local
    Quorum's environment may set one (flags and environment win over the file)."""
    argv = [quorum.argv[0], "-m", "extender", "--config", str(config), "--port", str(port)]
    kubeconfig = _argv_value(quorum.argv, "--kubeconfig")
    return argv + (["--kubeconfig", kubeconfig] if kubeconfig else [])


def scheduler_command(scheduler: LocalProcess, config: Path, port: int) -> list[str]:
    argv = list(scheduler.argv)
    argv[argv.index("--config") + 1] = str(config)
    argv[argv.index("--secure-port") + 1] = str(port)
    if "--cert-dir" in argv[:-1]:
        argv[argv.index("--cert-dir") + 1] = str(config.parent / "scheduler-certs")
    return argv


@pytest.fixture
def tls_pair(scenario: Scenario) -> Iterator[TlsPair]:
    quorum = LocalProcess.from_pid_file(PIDS / "quorum.pid", must_contain="extender")
    scheduler = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
    if isinstance(quorum, str) or isinstance(scheduler, str):
        why = quorum if isinstance(quorum, str) else scheduler
        pytest.skip(f"needs the local cluster's processes: {why}")
    base_path, sched_path = config_of(quorum), _argv_value(scheduler.argv, "--config")
    if not base_path or not sched_path:
        pytest.skip("the local processes do not name their configuration files")
    with tempfile.TemporaryDirectory(prefix="quorum-mtls-") as tmp:
        root = Path(tmp)
        pki = make_pki(root)
        ca, server, client = pki.ca, pki.server, pki.scheduler
        verbs_port, ops_port = free_port(), free_port()

        config = merged(yaml.safe_load(Path(base_path).read_text()) or {}, {
            "listen": {"port": verbs_port, "metricsPort": ops_port,
                       "tls": {"certFile": str(server.cert), "keyFile": str(server.key),
                               "clientCAFile": str(ca.cert), "clientNames": ["kube-scheduler"]}},
            "preemption": {"enabled": False}})
        (root / "quorum.yaml").write_text(yaml.safe_dump(config))
        sched = yaml.safe_load(Path(sched_path).read_text())
        sched["profiles"][0]["schedulerName"] = PROFILE
        sched["extenders"][0].update({
            "urlPrefix": f"https://127.0.0.1:{verbs_port}", "enableHTTPS": True,
            "tlsConfig": {"certFile": str(client.cert), "keyFile": str(client.key), "caFile": str(ca.cert),
                          "serverName": "localhost"}})
        (root / "kube-scheduler.yaml").write_text(yaml.safe_dump(sched))

        logs = REPO_ROOT / ".cache" / "e2e"
        logs.mkdir(parents=True, exist_ok=True)
        command = quorum_command(quorum, root / "quorum.yaml", verbs_port)
        procs = [start(command, logs / "mtls-quorum.log", quorum.cwd, quorum.env)]
        ops = Quorum(f"http://127.0.0.1:{ops_port}")
        try:
            if not wait(ops.ready, timeout=60, interval=0.3):
                pytest.fail(f"the mTLS Quorum did not become ready; see {logs / 'mtls-quorum.log'}")
            procs.append(start(scheduler_command(scheduler, root / "kube-scheduler.yaml", free_port()),
                               logs / "mtls-kube-scheduler.log", scheduler.cwd, scheduler.env))
            yield TlsPair(pki, verbs_port, ops, logs)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(timeout=10)


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
    filters = sum(value for (name, labels), value in tls_pair.ops.metrics().items()
                  if name == "quorum_request_duration_seconds_count" and ("verb", "filter") in labels)
    assert binds >= size and filters >= 1, "the verbs were answered by the mTLS Quorum"

    assert refused_in_handshake(tls_pair, None), "a client without a certificate is refused"
    assert refused_in_handshake(tls_pair, tls_pair.pki.stranger), "a certificate of another CA is refused"
    assert tls_call(tls_pair, tls_pair.pki.intruder) == 403, "only the scheduler's certificate may call verbs"
    assert tls_call(tls_pair, tls_pair.pki.intruder, "/bind") == 403
    assert tls_call(tls_pair, tls_pair.pki.scheduler) == 400, "the scheduler's certificate reaches the verbs"
    sc.record("mtls", {"binds": binds, "filters": filters})
    sc.finish()
