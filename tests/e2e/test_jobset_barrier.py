"""The startup barrier of JobSet's group-scheduling design, for JobSets that ask Quorum for their
gangs (``quorum.dev/jobset-gang``), with the real JobSet controller: the gang-started signal (the
ConfigMap the pods' init containers wait for) and the barrier's timeout (a gang not Ready in time is
requeued whole). Run with the Kueue scenarios (``-m controllers``, ``hack/cluster-up.sh --jobset
--kueue``), the test command's controllers suite (docs/kueue.md)."""

from __future__ import annotations

import pytest

from .lifecycle_support import kwok_annotations, quorum_events
from .scenario import Scenario
from .test_jobset import GROUP, VERSION, create, require_jobset
from .test_jobset_gangs import jobset, jobset_pods, replicated_job
from .test_started_signal import configmap

pytestmark = pytest.mark.controllers


def jobset_annotation(sc: Scenario, name: str, key: str) -> str | None:
    body = sc.kube.custom.get_namespaced_custom_object(GROUP, VERSION, sc.ns, "jobsets", name,
                                                       _request_timeout=30)
    return (body["metadata"].get("annotations") or {}).get(key)


def test_a_jobset_gang_gets_its_started_signal_owned_by_the_jobset(scenario: Scenario) -> None:
    """The startup barrier of JobSet's group-scheduling design: once every member started, the
    ConfigMap the pods' init containers wait for exists, named by the JobSet, owned by it."""
    sc = scenario
    require_jobset(sc)
    size = 3
    part = replicated_job(sc, "workers", 1, size, 1, "js-barrier", size)
    body = jobset("barrier", [part], jobset_gang="jobset", started_configmap="barrier-started")
    create(sc, body)
    names = jobset_pods(sc, "barrier", size)
    sc.wait_bound(names, timeout=90, what=f"all {size} pods of the JobSet bound")
    made = sc.wait_for("the gang-started ConfigMap", lambda: configmap(sc, "barrier-started"), timeout=30)
    assert made["data"]["gang"] == f"{sc.ns}/barrier/attempt.0", made["data"]
    assert made["data"]["members"] == str(size), made["data"]
    owners = made["metadata"]["owner_references"] or []
    assert [(o["kind"], o["name"]) for o in owners] == [("JobSet", "barrier")], owners
    started = [e for e in quorum_events(sc, "JobSet", "barrier") if e.get("reason") == "GangStarted"]
    assert started or sc.wait_for("the GangStarted Event on the JobSet", lambda: [
        e for e in quorum_events(sc, "JobSet", "barrier") if e.get("reason") == "GangStarted"], timeout=20)
    sc.finish()


def test_a_jobset_gang_not_ready_within_its_timeout_is_requeued_whole(scenario: Scenario) -> None:
    """The barrier's timeout (``timeoutAfterSeconds`` in the design document): pods bound but never
    Ready are all evicted at once, and the requeue is counted on the JobSet; its Jobs recreate them."""
    sc = scenario
    require_jobset(sc)
    size = 3
    part = replicated_job(sc, "workers", 1, size, 1, "js-slow", size)
    job = part["template"]["spec"]
    job["template"]["metadata"]["annotations"].update(kwok_annotations(never_ready=True))
    job["backoffLimit"] = 6
    job["podFailurePolicy"] = {"rules": [{"action": "Ignore",
                                          "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    create(sc, jobset("slow", [part], jobset_gang="jobset", pods_ready_timeout_seconds="5"))
    first = jobset_pods(sc, "slow", size)
    sc.wait_bound(first, timeout=90, what=f"all {size} pods of the JobSet bound")
    sc.wait_for("every first pod evicted", lambda: not set(first) & set(sc.pods()), timeout=45)
    sc.wait_for("requeue count 1 on the JobSet",
                lambda: jobset_annotation(sc, "slow", "quorum.dev/requeue-count") == "1", timeout=20)
    seen = [e.get("reason") for e in quorum_events(sc, "JobSet", "slow")]
    assert "Requeued" in seen, f"the requeue is told on the JobSet: {seen}"
    sc.watcher.retire("js-slow")  # its recreated pods go on binding and being evicted
    sc.finish()
