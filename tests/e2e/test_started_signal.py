"""The gang-started signal (the startup barrier of JobSet's group-scheduling design): once every
member of a gang has started (a kubelet took it: ``status.startTime``), Quorum records it on the
PodGroup (condition ``quorum.dev/GangStarted`` and a ``GangStarted`` Event) and, for a gang that asks
for it, writes the ConfigMap its members' init containers wait for.

kwok starts one member 8 s after its bind (annotation ``kwok.quorum.dev/start-after``), as a slow
node would: until then the gang is bound but not started, and nothing may say it is.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from .lifecycle_support import create_podgroup, quorum_events
from .scenario import Scenario

pytestmark = pytest.mark.e2e

CONFIGMAP = "barrier-started"
LATE = "8s"


def configmap(sc: Scenario, name: str = CONFIGMAP) -> dict[str, Any] | None:
    """The ConfigMap in the test's namespace, or None when it does not exist."""
    try:
        return sc.kube.core.read_namespaced_config_map(name, sc.ns, _request_timeout=30).to_dict()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def started_condition(sc: Scenario) -> dict[str, Any] | None:
    group = sc.kube.podgroup(sc.ns, "barrier") or {}
    return next((c for c in (group.get("status") or {}).get("conditions") or []
                 if c.get("type") == "quorum.dev/GangStarted"), None)


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_gang_started_condition_and_configmap_only_after_every_member_started(scenario: Scenario) -> None:
    sc = scenario
    size = 4
    create_podgroup(sc.kube, sc.ns, "barrier", size, rack_label=None,
                    annotations={"quorum.dev/started-configmap": CONFIGMAP})
    members = [sc.pod(f"barrier-{i}", gpus=1, pod_group="barrier") for i in range(size)]
    members[-1]["metadata"].setdefault("annotations", {})["kwok.quorum.dev/start-after"] = LATE
    sc.create(members)
    names = [m["metadata"]["name"] for m in members]
    sc.wait_bound(names, timeout=60, what="gang 'barrier' bound")

    # Bound, three started, the last not yet: no signal of any kind.
    # The signals are read first, the pods after: a member not started in the later read had not
    # started when the signals were read either (a start time is set once), so no signal may exist.
    checks = 0
    while True:
        made_early = configmap(sc)
        condition = started_condition(sc)
        events = [e for e in quorum_events(sc, "PodGroup", "barrier") if e.get("reason") == "GangStarted"]
        pods = sc.pods_named(names)
        if all((p.get("status") or {}).get("startTime") for p in pods.values()):
            break
        assert made_early is None, "the ConfigMap appeared before every member started"
        assert condition is None or condition.get("status") != "True", f"started too early: {condition}"
        assert not events, f"the GangStarted Event came before every member started: {events}"
        checks += 1
        time.sleep(0.5)
    assert checks >= 4, f"the late member started after {checks} checks: the test saw no window"
    last_start = max(stamp(p["status"]["startTime"]) for p in pods.values())

    made = sc.wait_for("the gang-started ConfigMap", lambda: configmap(sc), timeout=20)
    assert made["data"]["gang"] == f"{sc.ns}/barrier" and made["data"]["members"] == str(size)
    assert made["metadata"]["creation_timestamp"] >= last_start.replace(microsecond=0)
    owners = made["metadata"]["owner_references"] or []
    assert [(o["kind"], o["name"]) for o in owners] == [("PodGroup", "barrier")], owners
    condition = sc.wait_for("the GangStarted condition", lambda: (c := started_condition(sc))
                            and c.get("status") == "True" and c, timeout=20)
    assert stamp(condition["lastTransitionTime"]) >= last_start.replace(microsecond=0)
    sc.wait_for("the GangStarted Event", lambda: [e for e in quorum_events(sc, "PodGroup", "barrier")
                                                   if e.get("reason") == "GangStarted"], timeout=20)
    sc.record("configmap_after_last_start_seconds",
              round((made["metadata"]["creation_timestamp"] - last_start).total_seconds(), 2))
    sc.record("window_checks", checks)
    sc.finish()
