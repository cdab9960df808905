"""After the bind, through the real kube-scheduler, Job controller and kwok pods: readiness timeout,
requeue with backoff across a Quorum restart, deactivation, recovery from a failed member and from
two nodes deleted at once; Events and PodGroup conditions read back from the apiserver.

Quorum runs with tests/e2e/quorum-e2e.yaml: requeue backoff 10 s doubling, a requeue limit of 1.
The readiness and recovery timeouts are set per gang with annotations on the PodGroup. Gangs are
Indexed Jobs with ``backoffLimitPerIndex``, so the Job controller replaces an evicted or failed pod
after 10 s (its per-index failure delay), and evictions do not count against the Job.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from extender.gang.reporting import RECOVERING_GRACE_SECONDS

from .lifecycle_support import (
    NodeFaults,
    fail_pod,
    job_pods,
    kwok_annotations,
    live_bound,
    quorum_events,
    start_gang,
)
from .process import LocalProcess
from .scenario import Scenario

pytestmark = pytest.mark.e2e

ANN_READY_TIMEOUT = "quorum.dev/pods-ready-timeout-seconds"
ANN_RECOVERY_TIMEOUT = "quorum.dev/recovery-timeout-seconds"
ANN_REPLACE = "quorum.dev/replace-outside-domain"
ANN_REQUEUES = "quorum.dev/requeue-count"
ANN_DEACTIVATED = "quorum.dev/deactivated"


# ------------------------------------------------------------------------------------ helpers
def podgroup(sc: Scenario, name: str) -> dict[str, Any]:
    obj = sc.kube.podgroup(sc.ns, name)
    assert obj is not None, f"PodGroup {name} is gone"
    return obj


def annotation(sc: Scenario, name: str, key: str) -> str | None:
    return (podgroup(sc, name)["metadata"].get("annotations") or {}).get(key)


def condition(sc: Scenario, name: str, kind: str) -> dict[str, Any] | None:
    for c in (podgroup(sc, name).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def reasons(events: list[dict[str, Any]]) -> list[str]:
    return [str(e.get("reason")) for e in events]


def phase(sc: Scenario, gang: str) -> str:
    return str((sc.gang_debug(gang) or {}).get("phase"))


# ------------------------------------------------------------------------------------ (a) + (e)
def test_a_gang_never_ready_is_requeued_whole_keeps_its_count_across_a_restart_then_is_deactivated(
        scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    process = LocalProcess.from_pid_file(sc.settings.quorum_pid_file, must_contain="extender")
    if isinstance(process, str):
        pytest.skip(process)
    size, gpus = 4, max(1, topo.gpus_per_node // 2)
    start_gang(sc, "slow", size, gpus, group_annotations={ANN_READY_TIMEOUT: "5"},
               pod_annotations=kwok_annotations(never_ready=True))
    first = sc.wait_for("the gang bound", lambda: live_bound(sc, "slow", size), timeout=60)
    bound_at = time.monotonic()

    # Readiness timeout: every member evicted, the gang requeued with backoff (count 1 on the PodGroup).
    sc.wait_for("every first member evicted", lambda: not set(first) & {p["metadata"]["name"] for p in
                                                                        job_pods(sc.kube, sc.ns, "slow")},
                timeout=30)
    evicted_after = round(time.monotonic() - bound_at, 1)
    sc.wait_for("requeue count 1 on the PodGroup", lambda: annotation(sc, "slow", ANN_REQUEUES) == "1",
                timeout=15)
    assert phase(sc, "slow") == "Backoff", sc.gang_debug("slow")
    # Events are written after the evictions, in the background: let them land before the kill
    # below (a busy machine lost the last one there).
    sc.wait_for("an Evicted Event per first member", lambda: sum(
        1 for name in first for e in quorum_events(sc, "Pod", name) if e.get("reason") == "Evicted") == size,
        timeout=30)

    # Quorum dies in the middle of the backoff; the new process resumes the count from the PodGroup.
    process.kill()
    process.restart()
    sc.wait_for("restarted Quorum ready", sc.quorum.ready, timeout=60, interval=0.2)
    sc.wait_for("the restarted Quorum shows the resumed backoff",
                lambda: phase(sc, "slow") == "Backoff", timeout=15)

    # After the backoff the Job's new pods bind, never become Ready, and the limit (1) is reached.
    second = sc.wait_for("the gang bound again", lambda: live_bound(sc, "slow", size), timeout=90)
    assert not set(second) & set(first)
    sc.wait_for("the gang deactivated", lambda: annotation(sc, "slow", ANN_DEACTIVATED), timeout=45)
    sc.wait_for("its members evicted", lambda: not set(second) & {p["metadata"]["name"] for p in
                                                                  job_pods(sc.kube, sc.ns, "slow")},
                timeout=30)
    assert annotation(sc, "slow", ANN_REQUEUES) == "1", "the count survived the restart"
    assert phase(sc, "slow") == "Deactivated", sc.gang_debug("slow")
    third = sc.wait_for("the Job's third pods", lambda: [p["metadata"]["name"] for p in
                                                         job_pods(sc.kube, sc.ns, "slow")] or None,
                        timeout=60)
    sc.assert_unbound_for(third, 5, what="members of a deactivated gang")

    deactivated = condition(sc, "slow", "quorum.dev/Deactivated")
    assert deactivated and deactivated["status"] == "True", podgroup(sc, "slow").get("status")
    scheduled = condition(sc, "slow", "PodGroupInitiallyScheduled")
    assert scheduled and scheduled["status"] == "True" and scheduled["reason"] == "Scheduled"
    seen = reasons(quorum_events(sc, "PodGroup", "slow"))
    for expected in ("Bound", "Requeued", "BackOff", "Deactivated"):
        assert expected in seen, f"{expected} missing from the PodGroup's Events {seen}"
    requeued = next(e for e in quorum_events(sc, "PodGroup", "slow") if e.get("reason") == "Requeued")
    assert "Ready within 5s" in str(requeued.get("note") or requeued.get("message")), requeued
    evicted = [e for name in first for e in quorum_events(sc, "Pod", name) if e.get("reason") == "Evicted"]
    assert len(evicted) == size, f"one Evicted Event per first member: {evicted}"
    sc.record("readiness", {"evicted_after_bound_seconds": evicted_after, "events": seen})
    sc.watcher.retire("slow")
    sc.finish()


# ------------------------------------------------------------------------------------ (b)
def test_a_failed_member_is_replaced_in_the_gangs_rack_and_the_gang_recovers(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(nodes_per_rack=3)
    if why:
        pytest.skip(why)
    size, gpus = 4, max(1, topo.gpus_per_node // 2)
    sc.watcher.grace = 60.0  # recovering: one member short while the Job replaces it
    start_gang(sc, "ring", size, gpus, rack=True, group_annotations={ANN_RECOVERY_TIMEOUT: "120"})
    first = sc.wait_for("the gang bound", lambda: live_bound(sc, "ring", size), timeout=60)
    racks = {topo.rack_of(n) for n in first.values()}
    assert len(racks) == 1, first
    victim = sorted(first)[0]
    fail_pod(sc.kube, sc.ns, victim)
    failed_at = time.monotonic()
    sc.wait_for("the gang recovering", lambda: phase(sc, "ring") == "Recovering", timeout=30, interval=0.1)
    recovering = condition(sc, "ring", "quorum.dev/Recovering")
    pods_ready = sc.wait_for(
        "quorum.dev/PodsReady False with reason WaitForPodsRecovery",
        lambda: (c if (c := condition(sc, "ring", "quorum.dev/PodsReady") or {}).get("reason")
                 == "WaitForPodsRecovery" and c.get("status") == "False" else None), timeout=15, interval=0.1)
    sc.record("pods_ready_while_recovering", str(pods_ready.get("message"))[:200])
    again = sc.wait_for("a replacement bound", lambda: live_bound(sc, "ring", size), timeout=60)
    recovered_after = round(time.monotonic() - failed_at, 1)
    replacement = sorted(set(again) - set(first))
    assert len(replacement) == 1, again
    assert topo.rack_of(again[replacement[0]]) in racks, f"replacement placed outside the rack {racks}"
    sc.wait_for("the gang Bound again", lambda: phase(sc, "ring") == "Bound", timeout=15)
    sc.wait_for("Recovering condition cleared", lambda: (condition(sc, "ring", "quorum.dev/Recovering")
                                                         or {}).get("status") == "False", timeout=15)
    assert recovering is None or recovering["status"] == "True"
    # Events are written asynchronously by the recorder: wait for the one that closes the recovery.
    def recovered() -> list[str] | None:
        got = reasons(quorum_events(sc, "PodGroup", "ring"))
        return got if "Recovering" in got and "Recovered" in got[got.index("Recovering"):] else None

    seen = sc.wait_for("a Recovered Event after Recovering", recovered, timeout=15)
    sc.record("recovery", {"recovered_after_failure_seconds": recovered_after, "events": seen})
    sc.finish()


# ------------------------------------------------------------------------------------ (c)
def test_two_nodes_of_a_running_gang_deleted_at_once_the_gang_is_re_placed_whole(
        scenario: Scenario, node_faults: NodeFaults) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(racks_per_block=2, nodes_per_rack=4)
    if why:
        pytest.skip(why)
    size = topo.nodes_per_rack  # one whole node per member: the rack is full
    sc.watcher.grace = 60.0
    # No podFailurePolicy: the Job replaces a pod as soon as it is being deleted. (With one, it
    # waits until the pod is Failed, which for a pod on a deleted node only pod GC reports, about a
    # minute later: see tests/e2e/README.md.)
    start_gang(sc, "wide", size, topo.gpus_per_node, rack=True,
               group_annotations={ANN_RECOVERY_TIMEOUT: "120", ANN_REPLACE: "true"}, failure_policy=False)
    first = sc.wait_for("the gang bound", lambda: live_bound(sc, "wide", size), timeout=60)
    (rack,) = {topo.rack_of(n) for n in first.values()}
    gone = sorted(first.values())[:2]
    node_faults.delete(gone)
    deleted_at = time.monotonic()

    def whole_elsewhere() -> dict[str, str] | None:
        placement = live_bound(sc, "wide", size)
        if placement is None or set(placement) & set(first):
            return None
        return placement

    final = sc.wait_for("the whole gang re-placed", whole_elsewhere, timeout=120)
    replaced_after = round(time.monotonic() - deleted_at, 1)
    racks = {topo.rack_of(n) for n in final.values()}
    assert len(racks) == 1 and rack not in racks, f"re-placed whole in one other rack: {final}"
    assert not set(final.values()) & set(gone)
    seen = reasons(quorum_events(sc, "PodGroup", "wide"))
    for expected in ("Recovering", "Replacing", "Bound"):
        assert expected in seen, f"{expected} missing from {seen}"
    sc.wait_for("the gang Bound again", lambda: phase(sc, "wide") == "Bound", timeout=15)
    sc.record("two_nodes_lost", {"re_placed_after_seconds": replaced_after, "events": seen,
                                 "longest_partial_seconds": sc.watcher.longest_partial.get("wide")})
    sc.finish()


# ------------------------------------------------------------------------------------ NotReady
def test_a_ready_gang_whose_node_goes_not_ready_is_requeued_whole_after_the_recovery_timeout(
        scenario: Scenario, node_faults: NodeFaults) -> None:
    sc, topo = scenario, scenario.topo
    size, gpus = 4, max(1, topo.gpus_per_node // 2)
    sc.watcher.grace = 60.0
    start_gang(sc, "steady", size, gpus, group_annotations={ANN_RECOVERY_TIMEOUT: "10"})
    first = sc.wait_for("the gang bound", lambda: live_bound(sc, "steady", size), timeout=60)
    sc.wait_for("the gang Ready", lambda: (condition(sc, "steady", "quorum.dev/PodsReady") or {})
                .get("status") == "True", timeout=30)
    sick = sorted(first.values())[0]
    node_faults.make_not_ready([sick])
    sick_at = time.monotonic()
    sc.wait_for("the gang recovering", lambda: phase(sc, "steady") == "Recovering", timeout=30, interval=0.1)
    sc.wait_for("every member evicted after the recovery timeout",
                lambda: not set(first) & {p["metadata"]["name"] for p in job_pods(sc.kube, sc.ns, "steady")},
                timeout=40)
    evicted_after = round(time.monotonic() - sick_at, 1)
    assert annotation(sc, "steady", ANN_REQUEUES) == "1"
    again = sc.wait_for("the gang bound again", lambda: live_bound(sc, "steady", size), timeout=90)
    assert sick not in again.values(), f"re-placed on the NotReady node: {again}"
    seen = reasons(quorum_events(sc, "PodGroup", "steady"))
    requeued = [e for e in quorum_events(sc, "PodGroup", "steady") if e.get("reason") == "Requeued"]
    note = str(requeued[0].get("note") or requeued[0].get("message")) if requeued else ""
    assert "not recovered within 10s" in note, requeued
    sc.record("node_not_ready", {"evicted_after_seconds": evicted_after, "events": seen})
    sc.finish()


# ------------------------------------------------------------------------------------ teardown
def test_deleting_a_running_gangs_job_gives_no_warning_and_writes_nothing_to_its_podgroup(
        scenario: Scenario) -> None:
    """The garbage collector deletes the Job's pods one by one: each loss must not read as a failure
    (a Warning ``Recovering`` Event and condition writes on a PodGroup about to go)."""
    sc, topo = scenario, scenario.topo
    size, gpus = 4, max(1, topo.gpus_per_node // 2)
    start_gang(sc, "gone", size, gpus)
    sc.wait_for("the gang bound", lambda: live_bound(sc, "gone", size), timeout=60)
    sc.wait_for("the gang Ready", lambda: (condition(sc, "gone", "quorum.dev/PodsReady") or {})
                .get("status") == "True", timeout=30)
    before = (podgroup(sc, "gone").get("status") or {}).get("conditions")
    sc.kube.batch.delete_namespaced_job("gone", sc.ns, propagation_policy="Background", _request_timeout=30)
    sc.wait_for("every pod of the Job gone", lambda: not job_pods(sc.kube, sc.ns, "gone"), timeout=60)
    time.sleep(RECOVERING_GRACE_SECONDS + 2)  # past Quorum's grace, with every member gone
    warnings = [(e.get("reason"), e.get("note") or e.get("message"))
                for e in quorum_events(sc, "PodGroup", "gone") if e.get("type") == "Warning"]
    assert warnings == [], warnings
    assert (podgroup(sc, "gone").get("status") or {}).get("conditions") == before
    sc.record("job_deleted", {"events": reasons(quorum_events(sc, "PodGroup", "gone"))})
    sc.finish()
