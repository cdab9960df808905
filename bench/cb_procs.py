"""The processes under test: the kube-schedulers the benchmark starts beside Quorum's (the native
one, Quorum's profile in members-only mode, and Quorum's profile calling an extender that decides
nothing), CPU and memory of every component from /proc, and the metrics that say where the time
went."""

from __future__ import annotations

import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import yaml
from cb_kube import CLUSTER_DIR

from extender.cluster.resources import MEMBER_RESOURCE

ROOT = Path(__file__).resolve().parent.parent

NATIVE_PORT = 17260
NATIVE_NAME = "native-scheduler"  # also in hack/lib/cluster-common.sh, so cluster-down stops it
MEMBERS_PORT = 17261
MEMBERS_NAME = "members-scheduler"  # also in hack/lib/cluster-common.sh
MEMBERS_PROFILE = "quorum-members"
NULL_PORT = 17262
NULL_NAME = "null-scheduler"  # also in hack/lib/cluster-common.sh
NULL_PROFILE = "null-extender"
NULL_EXTENDER = "null-extender"  # the process (bench/nullextender), also in hack/lib/cluster-common.sh
NULL_EXTENDER_ADDRESS = "127.0.0.1:17263"
COMPONENTS = ("quorum", "kube-scheduler", NATIVE_NAME, MEMBERS_NAME, NULL_NAME, NULL_EXTENDER,
              "kube-apiserver", "etcd", "kube-controller-manager", "kwok")
_TICKS = os.sysconf("SC_CLK_TCK")

NATIVE_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "{kubeconfig}"
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
percentageOfNodesToScore: {percentage}
profiles:
- schedulerName: native
"""


def pid_of(name: str) -> int | None:
    try:
        pid = int((CLUSTER_DIR / "pids" / f"{name}.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its reaped children, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_by_component() -> dict[str, float]:
    out = {}
    for name in COMPONENTS:
        pid = pid_of(name)
        if pid is not None:
            out[name] = cpu_seconds(pid)
    return out


class Paused:
    """A component stopped (SIGSTOP) for the ``with`` block, resumed (SIGCONT) at its end: its
    watches queue what happens meanwhile, and it finds all of it at once when it resumes."""

    def __init__(self, name: str) -> None:
        pid = pid_of(name)
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        self.pid = pid

    def __enter__(self) -> Paused:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc: object) -> None:
        os.kill(self.pid, signal.SIGCONT)


def quorum_config_as(profile: str, edit: Callable[[dict[str, Any]], None]) -> str:
    """Quorum's kube-scheduler configuration as cluster-up wrote it, under another profile name,
    with ``edit`` applied to its extender."""
    doc = yaml.safe_load((CLUSTER_DIR / "kube-scheduler.yaml").read_text())
    doc["profiles"][0]["schedulerName"] = profile
    for extender in doc["extenders"]:
        edit(extender)
    return str(yaml.safe_dump(doc, sort_keys=False))


def quorum_config_file(directory: Path) -> Path:
    """Quorum's own configuration, serving the members-only profile as well (the members' bind
    calls come from that profile; Quorum refuses pods of profiles it does not serve)."""
    doc = yaml.safe_load((ROOT / "scheduler-config" / "quorum.yaml").read_text())
    doc["schedulerNames"] = [*doc.get("schedulerNames", ["quorum"]), MEMBERS_PROFILE]
    path = directory / "quorum.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _members_only(extender: dict[str, Any]) -> None:
    """Consulted only about pods that request the member resource."""
    extender["managedResources"] = [{"name": MEMBER_RESOURCE, "ignoredByScheduler": True}]


def _null_extender(extender: dict[str, Any]) -> None:
    """The same verbs, weight and timeouts, answered by bench/nullextender (no preemption)."""
    for key in ("preemptVerb", "enableHTTPS", "tlsConfig"):
        extender.pop(key, None)
    extender["urlPrefix"] = f"http://{NULL_EXTENDER_ADDRESS}"


def _stop(name: str) -> None:
    """SIGTERM a process started by the benchmark and wait (up to 10 s) until it is gone."""
    pid = pid_of(name)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    (CLUSTER_DIR / "pids" / f"{name}.pid").unlink(missing_ok=True)


@dataclass
class SecondScheduler:
    """Another kube-scheduler from the same binary, under its own name, port and configuration."""

    binary: Path
    gates: str
    name: str
    port: int
    config_text: str

    def start(self) -> None:
        if pid_of(self.name) is not None:
            self.stop()
        config = CLUSTER_DIR / f"{self.name}.yaml"
        kubeconfig = CLUSTER_DIR / "scheduler.kubeconfig"
        config.write_text(self.config_text)
        log = open(CLUSTER_DIR / "logs" / f"{self.name}.log", "ab")
        proc = subprocess.Popen(
            [str(self.binary), "--config", str(config), "--feature-gates", self.gates,
             "--authentication-kubeconfig", str(kubeconfig), "--authorization-kubeconfig", str(kubeconfig),
             "--bind-address", "127.0.0.1", "--secure-port", str(self.port),
             "--cert-dir", str(CLUSTER_DIR / f"{self.name}-certs"), "--profiling=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (CLUSTER_DIR / "pids" / f"{self.name}.pid").write_text(str(proc.pid))
        deadline = time.monotonic() + 60
        while _scheduler_metrics(self.port) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start; see {log.name}")
            time.sleep(0.5)

    def stop(self) -> None:
        _stop(self.name)


def native_scheduler(binary: Path, gates: str, percentage: int) -> SecondScheduler:
    """Profile ``native``, gang scheduling on (``gates``)."""
    kubeconfig = CLUSTER_DIR / "scheduler.kubeconfig"
    return SecondScheduler(binary, gates, NATIVE_NAME, NATIVE_PORT,
                           NATIVE_CONFIG.format(kubeconfig=kubeconfig, percentage=percentage))


def members_scheduler(binary: Path) -> SecondScheduler:
    """Quorum's profile in members-only mode, with the gates Quorum's own kube-scheduler runs."""
    return SecondScheduler(binary, _quorum_scheduler_gates(), MEMBERS_NAME, MEMBERS_PORT,
                           quorum_config_as(MEMBERS_PROFILE, _members_only))


def _quorum_scheduler_gates() -> str:
    pid = pid_of("kube-scheduler")
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if pid else []
    return argv[argv.index("--feature-gates") + 1] if "--feature-gates" in argv[:-1] else ""


def null_scheduler(binary: Path) -> SecondScheduler:
    """Quorum's profile, gates and extender settings, its extender replaced by one that decides
    nothing: what the protocol costs a plain pod, with no extender work in it."""
    return SecondScheduler(binary, _quorum_scheduler_gates(), NULL_NAME, NULL_PORT,
                           quorum_config_as(NULL_PROFILE, _null_extender))


def _scheduler_metrics(port: int) -> str | None:
    """A control-plane component's /metrics (kube-scheduler's or the apiserver's), as the admin."""
    pki = CLUSTER_DIR / "pki"
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # self-signed serving cert
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as r:
            return str(r.read().decode())
    except OSError:
        return None


QUORUM_URL = "http://127.0.0.1:8888"  # where hack/cluster-up.sh starts Quorum


def _quorum_metrics() -> str | None:
    try:
        with urllib.request.urlopen(f"{QUORUM_URL}/metrics", timeout=10) as r:
            return str(r.read().decode())
    except OSError:
        return None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$")


def _sum_series(text: str | None, wanted: dict[str, str]) -> dict[str, float]:
    """Sum each wanted series over its labels, keyed by the short name given for it; a label
    filter may follow the metric name, as in ``name{result="scheduled"}`` (substring match)."""
    out = dict.fromkeys(wanted, 0.0)
    for line in (text or "").splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", match.group(3)
        for short, spec in wanted.items():
            metric, _, filt = spec.partition("{")
            if name == metric and (not filt or filt.rstrip("}") in labels):
                out[short] += float(value)
    return out


QUORUM_SERIES = {
    "filter_calls": 'quorum_request_duration_seconds_count{verb="filter"',
    "filter_seconds": 'quorum_request_duration_seconds_sum{verb="filter"',
    "prioritize_calls": 'quorum_request_duration_seconds_count{verb="prioritize"',
    "prioritize_seconds": 'quorum_request_duration_seconds_sum{verb="prioritize"',
    "bind_calls": 'quorum_request_duration_seconds_count{verb="bind"',
    "bind_seconds": 'quorum_request_duration_seconds_sum{verb="bind"',
    "placements": "quorum_placements_total",
    "releases": "quorum_reservation_releases_total",
    "releases_replan": 'quorum_reservation_releases_total{reason="replan"',
    "releases_node_changed": 'quorum_reservation_releases_total{reason="node-changed"',
    "releases_timeout": 'quorum_reservation_releases_total{reason="timeout"',
    "nudges_sent": 'quorum_nudges_total{result="sent"',
    "claims": "quorum_claims_total",
    "gang_bind_seconds": "quorum_gang_bind_seconds_sum",
    "gang_binds": "quorum_gang_bind_seconds_count",
    "loop_lag_seconds": "quorum_event_loop_lag_seconds_sum",
    "loop_lag_samples": "quorum_event_loop_lag_seconds_count",
    "loop_lag_within_100ms": 'quorum_event_loop_lag_seconds_bucket{le="0.1"',
    "binds_failed": 'quorum_binds_total{outcome="error"',
    "watch_events": "quorum_watch_events_total",
    "watch_events_pods": 'quorum_watch_events_total{kind="pods"',
    "watch_events_nodes": 'quorum_watch_events_total{kind="nodes"',
}
SCHEDULER_SERIES = {
    "attempts": "scheduler_schedule_attempts_total",
    "attempts_unschedulable": 'scheduler_schedule_attempts_total{result="unschedulable"',
    "attempt_seconds": "scheduler_scheduling_attempt_duration_seconds_sum",
}


APISERVER_PORT = 16443  # hack/cluster-up.sh's default
_WAIT = "apiserver_flowcontrol_request_wait_duration_seconds"
# API Priority and Fairness: how long requests waited in the apiserver's queues, by the FlowSchema
# that classified them: Quorum's (manifests/flowschema.yaml), any other service account's, the
# default scheduler's.
APISERVER_SERIES = {
    f"apf_wait_{short}_{part}": f'{_WAIT}_{part}{{flow_schema="{schema}"'
    for short, schema in (("quorum", "quorum"), ("service_accounts", "service-accounts"),
                          ("kube_scheduler", "kube-scheduler"),
                          ("kube_system_accounts", "kube-system-service-accounts"))
    for part in ("sum", "count")
}


def metrics_snapshot() -> dict[str, dict[str, float]]:
    """Counters of Quorum, the schedulers and the apiserver, to subtract one snapshot from the next."""
    return {"quorum": _sum_series(_quorum_metrics(), QUORUM_SERIES),
            "kube-apiserver": _sum_series(_scheduler_metrics(APISERVER_PORT), APISERVER_SERIES),
            "kube-scheduler": _sum_series(_scheduler_metrics(17259), SCHEDULER_SERIES),
            NATIVE_NAME: _sum_series(_scheduler_metrics(NATIVE_PORT), SCHEDULER_SERIES),
            MEMBERS_NAME: _sum_series(_scheduler_metrics(MEMBERS_PORT), SCHEDULER_SERIES),
            NULL_NAME: _sum_series(_scheduler_metrics(NULL_PORT), SCHEDULER_SERIES)}


def audit_offset() -> int:
    path = CLUSTER_DIR / "logs" / "audit.log"
    return path.stat().st_size if path.exists() else 0


QUORUM_USER = "system:serviceaccount:quorum-system:quorum"


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def audit_since(offset: int, namespace: str
                ) -> tuple[dict[str, int], dict[str, float], dict[str, float]]:
    """From ``offset`` of the apiserver's audit log (hack/cluster-up.sh audits Quorum's requests
    and every binding): Quorum's writes by verb and resource (what it really sent, not what it
    meant to), when the apiserver completed each binding of a pod of ``namespace``, and when it
    received it (the spread of the latter is the client's, the rest the apiserver's)."""
    path = CLUSTER_DIR / "logs" / "audit.log"
    writes: dict[str, int] = {}
    binds: dict[str, float] = {}
    received: dict[str, float] = {}
    with open(path, "rb") as f:
        f.seek(offset if path.stat().st_size >= offset else 0)  # rotated: read the new file
        for line in f:
            event = orjson.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("subresource") == "binding" and ref.get("namespace") == namespace \
                    and event.get("responseStatus", {}).get("code") in (200, 201):
                binds[ref.get("name", "")] = _epoch(event["stageTimestamp"])
                received[ref.get("name", "")] = _epoch(event["requestReceivedTimestamp"])
            if event.get("user", {}).get("username") != QUORUM_USER or event.get("verb") in ("get", "list",
                                                                                                "watch"):
                continue
            sub = ref.get("subresource")
            key = f"{event.get('verb')} {ref.get('resource', '?')}" + (f"/{sub}" if sub else "")
            writes[key] = writes.get(key, 0) + 1
    return writes, binds, received


class Profiler:
    """Quorum's stacks from ``start_profiler`` to ``stop``: py-spy's wall-clock samples, or with
    ``cpu`` the CPU-time samples of bench/cpu_sampler.py, which Quorum must have been started under
    (``QUORUM_LAUNCH="bench/cpu_sampler.py --"`` for hack/cluster-up.sh)."""

    def __init__(self, directory: Path, name: str, cpu: bool) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        pid = pid_of("quorum")
        if pid is None:
            raise RuntimeError("Quorum is not running: nothing to profile")
        self.target, self.pid = directory / f"{name}.txt", pid
        self.spy: subprocess.Popen[bytes] | None = None
        if cpu:
            os.kill(self.pid, signal.SIGUSR1)  # forget what was sampled before the run
        else:
            self.spy = subprocess.Popen(["py-spy", "record", "-p", str(self.pid), "--rate", "50", "--format",
                                         "raw", "--nonblocking", "-o", str(self.target)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            self.spy.wait(timeout=60)
            return
        samples = CLUSTER_DIR / "quorum-cpu.txt"  # cpu_sampler.py's default --out
        before = samples.stat().st_mtime_ns if samples.exists() else 0
        os.kill(self.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not (samples.exists() and samples.stat().st_mtime_ns != before):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no CPU samples in {samples}: is Quorum under bench/cpu_sampler.py?")
            time.sleep(0.1)
        shutil.copyfile(samples, self.target)


def start_profiler(directory: Path, name: str, cpu: bool = False) -> Profiler:
    """Sample Quorum from now until the profiler's ``stop`` (see ``Profiler``)."""
    return Profiler(directory, name, cpu)


def profile_summary(path: Path, top: int = 25) -> list[str]:
    """The functions with the most samples, by their own time and including callees."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in {f.split(" (")[0] for f in frames}:
            inclusive[frame] = inclusive.get(frame, 0) + n
    out = [f"{path.name}: {total} samples"]
    for title, counts in (("own time:", own), ("including callees:", inclusive)):
        out.append(title)
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in ranked]
    return out
