"""The reasons users read, from the apiserver: Quorum's ``NoFit`` Event and the PodGroup conditions
``PodGroupInitiallyScheduled``, ``quorum.dev/PodsReady`` and the live ``PodGroupSatisfied``, with
their exact reasons.

Gangs are native PodGroups (only those carry conditions). The readiness timeout is set per gang
with an annotation on the PodGroup; kwok keeps the members of the second gang Running but never
Ready, so the gang sits in its start until the timeout requeues it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .lifecycle_support import (
    create_podgroup,
    fail_pod,
    job_pods,
    kwok_annotations,
    live_bound,
    quorum_events,
    start_gang,
)
from .scenario import Scenario

pytestmark = pytest.mark.e2e

ANN_READY_TIMEOUT = "quorum.dev/pods-ready-timeout-seconds"
ANN_RECOVERY_TIMEOUT = "quorum.dev/recovery-timeout-seconds"
SCHEDULED = "PodGroupInitiallyScheduled"
SATISFIED = "PodGroupSatisfied"
PODS_READY = "quorum.dev/PodsReady"


def condition(sc: Scenario, name: str, kind: str) -> dict[str, Any] | None:
    obj = sc.kube.podgroup(sc.ns, name)
    assert obj is not None, f"PodGroup {name} is gone"
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def condition_is(sc: Scenario, name: str, kind: str, status: str, reason: str) -> dict[str, Any] | None:
    c = condition(sc, name, kind)
    return c if c and c.get("status") == status and c.get("reason") == reason else None


def test_a_gang_that_does_not_fit_gets_a_nofit_event_and_an_unschedulable_condition(
        scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=2)
    if why:
        pytest.skip(why)
    gpn = topo.gpus_per_node
    size = topo.nodes_per_rack + 1  # whole-node members, one more than any rack has nodes
    create_podgroup(sc.kube, sc.ns, "toobig", size, rack_label=sc.settings.rack_label, annotations={})
    names = sc.create([sc.pod(f"toobig-{i}", gpus=gpn, pod_group="toobig") for i in range(size)])
    started = time.monotonic()

    events = sc.wait_for("Quorum's NoFit Event on PodGroup 'toobig'",
                         lambda: [e for e in quorum_events(sc, "PodGroup", "toobig")
                                  if e.get("reason") == "NoFit"], timeout=30)
    sc.record("nofit_event_after_seconds", round(time.monotonic() - started, 2))
    note = str(events[-1].get("note") or events[-1].get("message") or "")
    assert f"gang {sc.ns}/toobig" in note and "best rack fits" in note, (
        f"the NoFit Event must name the gang and its shortfall: {events[-1]}")
    assert events[-1].get("type") == "Normal", events[-1]
    sc.record("nofit_note", note[:300])

    unschedulable = sc.wait_for(
        f"{SCHEDULED} False with reason Unschedulable on PodGroup 'toobig'",
        lambda: condition_is(sc, "toobig", SCHEDULED, "False", "Unschedulable"), timeout=15)
    # First set while members were still being created; the message must follow the gang's reason.
    unschedulable = sc.wait_for(
        f"{SCHEDULED}'s message naming the shortfall, not the members' arrival",
        lambda: (c if "best rack fits" in str((c := condition(sc, "toobig", SCHEDULED) or {}).get("message"))
                 else None), timeout=15)
    sc.record("unschedulable_message", str(unschedulable.get("message"))[:300])
    sc.assert_unbound_for(names, 3, what="members of a gang that does not fit")
    assert condition_is(sc, "toobig", SCHEDULED, "False", "Unschedulable"), condition(sc, "toobig", SCHEDULED)
    sc.finish()


def test_pods_ready_condition_waits_for_the_start_then_says_requeued(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    size, gpus, timeout = 3, max(1, topo.gpus_per_node // 2), 6
    start_gang(sc, "starting", size, gpus, group_annotations={ANN_READY_TIMEOUT: str(timeout)},
               pod_annotations=kwok_annotations(never_ready=True))
    first = sc.wait_for("the gang bound", lambda: live_bound(sc, "starting", size), timeout=60)
    bound_at = time.monotonic()

    sc.wait_for(f"{PODS_READY} False with reason WaitForPodsStart",
                lambda: condition_is(sc, "starting", PODS_READY, "False", "WaitForPodsStart"),
                timeout=timeout)
    sc.record("wait_for_pods_start_after_bound_seconds", round(time.monotonic() - bound_at, 2))
    scheduled = condition_is(sc, "starting", SCHEDULED, "True", "Scheduled")
    assert scheduled, f"a bound gang is initially scheduled: {condition(sc, 'starting', SCHEDULED)}"

    sc.watcher.retire("starting")  # the requeue evicts every member
    requeued = sc.wait_for(f"{PODS_READY} False with reason Requeued after the {timeout}s readiness timeout",
                           lambda: condition_is(sc, "starting", PODS_READY, "False", "Requeued"),
                           timeout=timeout + 30)
    requeued_after = time.monotonic() - bound_at
    sc.record("requeued_after_bound_seconds", round(requeued_after, 2))
    assert requeued_after >= timeout - 2, f"requeued {requeued_after:.1f}s after the bind, before its timeout"
    assert f"Ready within {timeout}s" in str(requeued.get("message")), requeued
    sc.wait_for("every first member evicted by the requeue",
                lambda: not set(first) & {p["metadata"]["name"]
                                          for p in job_pods(sc.kube, sc.ns, "starting")}, timeout=30)
    sc.finish()


def test_the_satisfied_condition_follows_a_running_gang_that_loses_a_member_and_replaces_it(
        scenario: Scenario) -> None:
    """``PodGroupSatisfied`` is live: False (``BelowMinCount``) while a running gang is a member
    short, True (``MinCountSatisfied``) again once the Job's replacement is bound."""
    sc, topo = scenario, scenario.topo
    size, gpus = 3, max(1, topo.gpus_per_node // 2)
    sc.watcher.grace = 60.0  # one member short while the Job replaces it
    start_gang(sc, "live", size, gpus, group_annotations={ANN_RECOVERY_TIMEOUT: "120"})
    first = sc.wait_for("the gang bound", lambda: live_bound(sc, "live", size), timeout=60)
    whole = sc.wait_for(f"{SATISFIED} True with reason MinCountSatisfied",
                        lambda: condition_is(sc, "live", SATISFIED, "True", "MinCountSatisfied"), timeout=15)
    assert whole.get("message") == f"{size} of {size} members scheduled", whole

    victim = sorted(first)[0]
    fail_pod(sc.kube, sc.ns, victim)
    failed_at = time.monotonic()
    short = sc.wait_for(f"{SATISFIED} False with reason BelowMinCount",
                        lambda: condition_is(sc, "live", SATISFIED, "False", "BelowMinCount"),
                        timeout=30, interval=0.1)
    sc.record("below_min_count_after_failure_seconds", round(time.monotonic() - failed_at, 2))
    assert short.get("message") == f"{size - 1} of {size} members scheduled", short

    again = sc.wait_for("a replacement bound", lambda: live_bound(sc, "live", size), timeout=60)
    assert len(set(again) - set(first)) == 1, again
    back = sc.wait_for(f"{SATISFIED} True again with reason MinCountSatisfied",
                       lambda: condition_is(sc, "live", SATISFIED, "True", "MinCountSatisfied"), timeout=15)
    assert back.get("message") == f"{size} of {size} members scheduled", back
    sc.record("satisfied_again_after_failure_seconds", round(time.monotonic() - failed_at, 2))
    sc.finish()
