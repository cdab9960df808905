"""Evictions all or none, through the real apiserver's PodDisruptionBudgets.

A lower-priority gang stands where a higher-priority gang could bind, but a PodDisruptionBudget
(policy/v1, ``minAvailable`` = the gang's size, selecting one member by its completion index)
protects one of its members. Quorum asks every member's eviction with a dry run before evicting
any: the budget refuses one, so not one member of the victim gang is evicted, and the refusal,
naming the budget, is reported on its PodGroup. Once the budget is deleted, the preemption goes
ahead: the victim gang goes whole and the preemptor binds whole in its rack.

Quorum runs with ``preemption.enabled`` (tests/e2e/quorum-e2e.yaml); a victim gang a budget
protected is spared for 30 s before it may be chosen again. The victim's PodGroup says
``disruptionMode: {all: {}}`` (a ``single`` one would be evicted member by member).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .lifecycle_support import HIGH, LOW, live_bound, quorum_events, start_gang
from .scenario import Scenario
from .test_preemption import all_running, high_blockers, quorum_event_reasons

pytestmark = pytest.mark.e2e

BUDGET = "keep-low-0"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
SPARED_SECONDS = 30.0


def protect_one_member(sc: Scenario, job: str, size: int) -> client.PolicyV1Api:
    """A budget no eviction of member 0 can satisfy: it selects that one pod and wants ``size``."""
    policy = client.PolicyV1Api(sc.kube.api)
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": BUDGET, "namespace": sc.ns},
            "spec": {"minAvailable": size,
                     "selector": {"matchLabels": {"job-name": job, INDEX_LABEL: "0"}}}}
    policy.create_namespaced_pod_disruption_budget(sc.ns, body, _request_timeout=30)  # type: ignore[arg-type]
    return policy


def delete_budget(sc: Scenario, policy: client.PolicyV1Api) -> None:
    try:
        policy.delete_namespaced_pod_disruption_budget(BUDGET, sc.ns, _request_timeout=30)
    except ApiException as exc:
        if exc.status != 404:
            raise


def refusal_notes(sc: Scenario, name: str) -> list[str]:
    """What Quorum's ``EvictionRefused`` Events about the PodGroup say."""
    return [str(e.get("note") or e.get("message") or "") for e in quorum_events(sc, "PodGroup", name)
            if e.get("reason") == "EvictionRefused"]


def test_a_budget_on_one_member_spares_the_whole_victim_gang_until_it_is_deleted(
        scenario: Scenario, priorities: dict[str, int]) -> None:
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    why = topo.shortfall(nodes_per_rack=2) or (None if len(racks) >= 2 else "needs >= 2 racks")
    if why:
        pytest.skip(why)
    size, gpn = len(topo.racks[racks[0]]), topo.gpus_per_node
    sc.watcher.grace = 30.0  # the victim's members go one eviction call each, once allowed
    keep = high_blockers(sc, [n for r in racks[1:] for n in topo.racks[r]])
    start_gang(sc, "low", size, gpn, rack=True, priority_class=LOW, disruption="all")
    low = sc.wait_for("gang low bound", lambda: live_bound(sc, "low", size), timeout=60)
    (low_rack,) = {topo.rack_of(n) for n in low.values()}
    policy = protect_one_member(sc, "low", size)
    try:
        start_gang(sc, "high", size, gpn, rack=True, priority_class=HIGH)
        notes = sc.wait_for("the refusal reported on gang low", lambda: refusal_notes(sc, "low") or None,
                            timeout=60)
        assert BUDGET in " ".join(notes), f"the refusal names the budget: {notes}"
        assert any("none was evicted" in note for note in notes), notes
        # kube-scheduler keeps retrying the preemptor; any eviction would show by now.
        time.sleep(5)
        assert all_running(sc, list(low)), "no member of a gang a budget protects is evicted"
        assert all_running(sc, keep), "pods at the preemptor's own priority are never victims"
        assert live_bound(sc, "high", size) is None, "the preemptor binds nothing meanwhile"
        assert "EvictionRefused" in quorum_event_reasons(sc, "PodGroup", "high")
    finally:
        delete_budget(sc, policy)

    started = time.monotonic()
    placed = sc.wait_for("gang high bound", lambda: live_bound(sc, "high", size),
                         timeout=SPARED_SECONDS + 90)
    bound_after = round(time.monotonic() - started, 1)
    assert {topo.rack_of(n) for n in placed.values()} == {low_rack}, placed
    pods = sc.pods_named(list(low))
    gone = [n for n in low if n not in pods or pods[n]["metadata"].get("deletionTimestamp")]
    assert sorted(gone) == sorted(low), f"the lower gang goes whole: {gone} of {sorted(low)}"
    assert "Preempted" in quorum_event_reasons(sc, "PodGroup", "low")
    sc.record("budget_lifted", {"bound_after_seconds": bound_after,
                                "longest_partial_seconds": sc.watcher.longest_partial.get("low")})
    sc.finish()
