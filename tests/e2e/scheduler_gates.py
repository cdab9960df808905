"""The suite's own kube-scheduler restarted with feature gates or another configuration for one
module, then put back.

Every module runs kube-scheduler as ``hack/cluster-up.sh`` starts it; a module that needs another
gate (``GenericWorkload`` for the group cycle, ``DRAWorkloadResourceClaims`` for PodGroup claims)
or another configuration (the extender's ``managedResources``) restarts the local process with it
and restarts it as it was afterwards. Each gate is read back from kube-scheduler's ``/metrics``
(``kubernetes_feature_enabled``), so a module cannot pass with a gate silently off.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from .cluster import wait
from .pairs import PIDS, argv_value
from .process import LocalProcess

# Pod-group scheduling cycles of the profile, by result; only the group cycle counts them.
GROUP_ATTEMPTS = re.compile(
    r'^scheduler_podgroup_schedule_attempts_total\{profile="quorum",result="([^"]+)"\} (\S+)$', re.MULTILINE)


class Scheduler:
    """The suite's kube-scheduler, reached on its secure port with the cluster's admin client cert."""

    def __init__(self, port: int, cluster_dir: Path) -> None:
        self.port = port
        self.context = ssl.create_default_context()
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE
        self.context.load_cert_chain(cluster_dir / "pki" / "admin.crt", cluster_dir / "pki" / "admin.key")

    def get(self, path: str) -> str:
        with urllib.request.urlopen(f"https://127.0.0.1:{self.port}{path}", context=self.context,
                                    timeout=5) as response:
            return str(response.read().decode())

    def healthy(self) -> bool:
        try:
            return self.get("/healthz") == "ok"
        except OSError:
            return False

    def gate_enabled(self, name: str) -> float | None:
        found = re.search(rf'^kubernetes_feature_enabled\{{name="{name}"[^}}]*\}} (\S+)$',
                          self.get("/metrics"), re.MULTILINE)
        return float(found.group(1)) if found else None

    def group_attempts(self) -> dict[str, float]:
        """kube-scheduler's pod-group scheduling attempts for the quorum profile, by result."""
        return {result: float(v) for result, v in GROUP_ATTEMPTS.findall(self.get("/metrics"))}


def with_gate(argv: list[str], gate: str, value: bool) -> list[str]:
    """``argv`` with ``gate`` set in ``--feature-gates`` (replaced if named, added otherwise)."""
    argv = list(argv)
    setting = f"{gate}={str(value).lower()}"
    if "--feature-gates" not in argv[:-1]:
        return [*argv, "--feature-gates", setting]
    at = argv.index("--feature-gates") + 1
    gates = [g for g in argv[at].split(",") if g and g.split("=", 1)[0] != gate]
    argv[at] = ",".join([*gates, setting])
    return argv


def restart_scheduler(running: LocalProcess, argv: list[str], scheduler: Scheduler) -> None:
    running.kill()
    LocalProcess(running.pid, argv, running.env, running.cwd, running.log_path, running.pid_file).restart()
    if not wait(scheduler.healthy, timeout=60, interval=0.3):
        raise RuntimeError(f"kube-scheduler did not answer /healthz on port {scheduler.port} after a restart")


def with_config(argv: list[str], edit: Callable[[dict[str, Any]], None]) -> list[str]:
    """``argv`` with ``--config`` pointing at a copy of its KubeSchedulerConfiguration that ``edit``
    changed (written beside the original, which stays as it was)."""
    argv = list(argv)
    at = argv.index("--config") + 1
    original = Path(argv[at])
    doc = yaml.safe_load(original.read_text())
    edit(doc)
    edited = original.with_name(f"{original.stem}-edited{original.suffix}")
    edited.write_text(yaml.safe_dump(doc, sort_keys=False))
    argv[at] = str(edited)
    return argv


@contextmanager
def restarted_scheduler(change: Callable[[list[str]], list[str]]) -> Iterator[Scheduler]:
    """The suite's kube-scheduler restarted with ``change(argv)``; restarted as it was after."""
    original = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
    if isinstance(original, str):
        pytest.skip(f"needs the local kube-scheduler process: {original}")
    scheduler = Scheduler(int(argv_value(original.argv, "--secure-port") or "10259"), PIDS.parent)
    restart_scheduler(original, change(original.argv), scheduler)
    try:
        yield scheduler
    finally:
        now = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
        if isinstance(now, str):
            raise RuntimeError(now)
        restart_scheduler(now, original.argv, scheduler)


@contextmanager
def scheduler_gates(gates: Mapping[str, bool]) -> Iterator[Scheduler]:
    """The suite's kube-scheduler with ``gates`` set, each read back; restarted as it was after."""
    def change(argv: list[str]) -> list[str]:
        for gate, value in gates.items():
            argv = with_gate(argv, gate, value)
        return argv

    with restarted_scheduler(change) as scheduler:
        for gate, value in gates.items():
            enabled = scheduler.gate_enabled(gate)
            assert enabled == float(value), f"kube-scheduler reports {gate}={enabled}, restarted with {value}"
        yield scheduler
