"""The main gang scenarios again, with kube-scheduler's own workload scheduling switched on.

In Kubernetes 1.38 ``GenericWorkload`` is on in kube-scheduler by default: a native PodGroup becomes
the unit of its queue, its members go through one group cycle, and the extender's filter and
prioritize are called inside that cycle once per member. Every other module runs kube-scheduler with
the gate off. Here the suite's own kube-scheduler is restarted with ``GenericWorkload=true`` for this
module (its profile keeps the native gang plugins disabled, as shipped) and put back afterwards.

Native PodGroups carry their members' PriorityClass: with the gate on, kube-scheduler refuses to
schedule a group whose pods' priority differs from the group's.

The gate is read back from kube-scheduler's ``/metrics`` (``kubernetes_feature_enabled``), and the
native-PodGroup scenarios must move its pod-group queue counter, so the module cannot pass with the
gate silently off or with the group cycle never reached.
"""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import Quorum, wait
from .pairs import PIDS, argv_value
from .process import LocalProcess
from .scenario import Scenario
from .test_all_or_nothing import (
    test_gang_needing_more_than_is_free_binds_nothing_until_capacity_frees as all_or_nothing,
)
from .test_lifecycle import (
    test_a_failed_member_is_replaced_in_the_gangs_rack_and_the_gang_recovers as failed_member_replaced,
)
from .test_preemption import (
    test_a_high_priority_gang_evicts_the_lower_of_two_gangs_whole_and_binds as high_evicts_lower,
)
from .test_queue import (
    test_the_higher_priority_gang_binds_first_when_capacity_frees_for_one as priority_first,
)
from .test_reasons import (
    test_a_gang_that_does_not_fit_gets_a_nofit_event_and_an_unschedulable_condition as native_nofit,
)
from .test_topology import test_required_rack_gang_binds_inside_one_rack as required_rack

pytestmark = pytest.mark.e2e

GATE = "GenericWorkload"
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


def _restart(running: LocalProcess, argv: list[str], scheduler: Scheduler) -> None:
    running.kill()
    LocalProcess(running.pid, argv, running.env, running.cwd, running.log_path, running.pid_file).restart()
    if not wait(scheduler.healthy, timeout=60, interval=0.3):
        raise RuntimeError(f"kube-scheduler did not answer /healthz on port {scheduler.port} after a restart")


@pytest.fixture(scope="module")
def generic_workload(quorum: Quorum) -> Iterator[Scheduler]:
    """The suite's kube-scheduler with ``GenericWorkload=true`` for this module; the gate is read back."""
    original = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
    if isinstance(original, str):
        pytest.skip(f"needs the local kube-scheduler process: {original}")
    scheduler = Scheduler(int(argv_value(original.argv, "--secure-port") or "10259"), PIDS.parent)
    _restart(original, with_gate(original.argv, GATE, True), scheduler)
    try:
        enabled = scheduler.gate_enabled(GATE)
        assert enabled == 1, f"kube-scheduler reports {GATE}={enabled} after a restart with it on"
        yield scheduler
    finally:
        now = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
        if isinstance(now, str):
            raise RuntimeError(now)
        _restart(now, original.argv, scheduler)


@pytest.fixture
def group_cycle(generic_workload: Scheduler) -> Iterator[None]:
    """Asserts that kube-scheduler ran group cycles for the test's native PodGroups."""
    before = generic_workload.group_attempts()
    yield
    after = generic_workload.group_attempts()
    ran = {r: n - before.get(r, 0.0) for r, n in after.items() if n > before.get(r, 0.0)}
    assert ran, f"kube-scheduler ran no pod-group cycle during the test: {before} -> {after}"


def test_gate_is_on(generic_workload: Scheduler) -> None:
    assert generic_workload.gate_enabled(GATE) == 1


def test_all_or_nothing_with_the_gate_on(generic_workload: Scheduler, scenario: Scenario) -> None:
    all_or_nothing(scenario)


def test_required_rack_with_the_gate_on(generic_workload: Scheduler, scenario: Scenario) -> None:
    required_rack(scenario)


def test_higher_priority_gang_first_with_the_gate_on(generic_workload: Scheduler, scenario: Scenario,
                                                      priorities: dict[str, int]) -> None:
    priority_first(scenario, priorities)


def test_native_gang_that_does_not_fit_with_the_gate_on(group_cycle: None, scenario: Scenario) -> None:
    native_nofit(scenario)


def test_native_gang_failed_member_replaced_with_the_gate_on(group_cycle: None, scenario: Scenario) -> None:
    failed_member_replaced(scenario)


def test_native_gang_preempts_a_lower_gang_whole_with_the_gate_on(group_cycle: None, scenario: Scenario,
                                                                   priorities: dict[str, int]) -> None:
    """The PodGroups carry their members' PriorityClass: kube-scheduler's group cycle refuses a group
    whose pods' priority differs from the group's (``start_gang`` sets both)."""
    high_evicts_lower(scenario, priorities)
