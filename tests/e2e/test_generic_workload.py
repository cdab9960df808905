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

from collections.abc import Iterator

import pytest

from .cluster import Quorum
from .lifecycle_support import create_podgroup
from .scenario import Scenario
from .scheduler_gates import Scheduler, scheduler_gates
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
from .test_reasons import SCHEDULED, condition
from .test_reasons import (
    test_a_gang_that_does_not_fit_gets_a_nofit_event_and_an_unschedulable_condition as native_nofit,
)
from .test_topology import test_required_rack_gang_binds_inside_one_rack as required_rack

pytestmark = pytest.mark.e2e

GATE = "GenericWorkload"


@pytest.fixture(scope="module")
def generic_workload(quorum: Quorum) -> Iterator[Scheduler]:
    """The suite's kube-scheduler with ``GenericWorkload=true`` for this module; the gate is read back."""
    with scheduler_gates({GATE: True}) as scheduler:
        yield scheduler


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


def test_the_shortfall_comes_back_after_kube_scheduler_writes_its_own_text(group_cycle: None,
                                                                           scenario: Scenario) -> None:
    """With the gate on, kube-scheduler writes ``PodGroupInitiallyScheduled`` itself after a group
    cycle, with its own text ("pod group is unschedulable"), over Quorum's shortfall. Quorum puts
    its text back (at most once per 30 s a gang): the messages go Quorum's, kube-scheduler's,
    Quorum's again, where before the fix the condition kept kube-scheduler's for good."""
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=2)
    if why:
        pytest.skip(why)
    size = topo.nodes_per_rack + 1  # whole-node members, one more than any rack has nodes
    create_podgroup(sc.kube, sc.ns, "toobig", size, rack_label=sc.settings.rack_label, annotations={})
    sc.create([sc.pod(f"toobig-{i}", gpus=topo.gpus_per_node, pod_group="toobig") for i in range(size)])
    ours = f"gang {sc.ns}/toobig"
    turns: list[bool] = []  # whose text the condition showed, Quorum's (True) or not, each change

    def back_again() -> bool:
        message = str((condition(sc, "toobig", SCHEDULED) or {}).get("message") or "")
        if message and (not turns or turns[-1] != (ours in message)):
            turns.append(ours in message)
        return any(turns[i:i + 3] == [True, False, True] for i in range(len(turns)))

    sc.record("turns", turns)  # the list as it grows: shown on failure too
    sc.wait_for("Quorum's shortfall, then kube-scheduler's text, then Quorum's again", back_again, timeout=75)
    sc.finish()


def test_native_gang_failed_member_replaced_with_the_gate_on(group_cycle: None, scenario: Scenario) -> None:
    failed_member_replaced(scenario)


def test_native_gang_preempts_a_lower_gang_whole_with_the_gate_on(group_cycle: None, scenario: Scenario,
                                                                   priorities: dict[str, int]) -> None:
    """The PodGroups carry their members' PriorityClass: kube-scheduler's group cycle refuses a group
    whose pods' priority differs from the group's (``start_gang`` sets both)."""
    high_evicts_lower(scenario, priorities)
