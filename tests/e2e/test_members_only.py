"""Opt-in mode: kube-scheduler consults Quorum only about pods that request ``quorum.dev/member``.

The extender's ``managedResources`` names ``quorum.dev/member`` with ``ignoredByScheduler``:
kube-scheduler calls the extender only for a pod that requests a resource it manages, and its own
resource filter ignores that one (no node offers it). Gang members request it, so they are still
held until the whole gang can bind; plain pods of the profile are scheduled and bound by
kube-scheduler alone, without Quorum's filter, prioritize and bind calls. Quorum leaves the resource
out of every pod's requests, as kube-scheduler does.

This module restarts the suite's kube-scheduler with that configuration and puts it back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .cluster import Quorum
from .scenario import Scenario
from .scheduler_gates import Scheduler, restarted_scheduler, with_config

pytestmark = pytest.mark.e2e

MEMBER = "quorum.dev/member"
VERBS = ("filter", "prioritize", "bind")


def members_only(config: dict[str, Any]) -> None:
    for extender in config["extenders"]:
        extender["managedResources"] = [{"name": MEMBER, "ignoredByScheduler": True}]


@pytest.fixture(scope="module")
def opt_in(quorum: Quorum) -> Iterator[Scheduler]:
    with restarted_scheduler(lambda argv: with_config(argv, members_only)) as scheduler:
        yield scheduler


def as_member(manifest: dict[str, Any]) -> dict[str, Any]:
    resources = manifest["spec"]["containers"][0]["resources"]
    resources.setdefault("limits", {})[MEMBER] = "1"
    resources.setdefault("requests", {})[MEMBER] = "1"
    return manifest


def calls(quorum: Quorum) -> dict[str, float]:
    samples = quorum.metrics()
    return {verb: sum(v for (name, labels), v in samples.items()
                      if name == "quorum_request_duration_seconds_count" and ("verb", verb) in labels)
            for verb in VERBS}


def test_members_are_held_until_the_whole_gang_can_bind(scenario: Scenario, opt_in: Scheduler,
                                                        quorum: Quorum) -> None:
    sc = scenario
    before = calls(quorum)
    members = [as_member(m) for m in sc.gang("g", 3, gpus=1, create=False)]
    names = [m["metadata"]["name"] for m in members]
    sc.create(members[:2])
    sc.assert_unbound_for(names[:2], 6, what="two members of a gang of 3")
    sc.create(members[2:])
    sc.wait_bound(names, timeout=60, what="the whole gang")
    after = calls(quorum)
    assert after["filter"] > before["filter"] and after["bind"] >= before["bind"] + 3, (before, after)
    kept = sc.kube.pod(sc.ns, names[0])
    assert kept is not None and kept["spec"]["containers"][0]["resources"]["limits"][MEMBER] == "1"


def test_plain_pods_are_scheduled_without_asking_quorum(scenario: Scenario, opt_in: Scheduler,
                                                        quorum: Quorum) -> None:
    sc = scenario
    before = calls(quorum)
    plain = [sc.pod(f"plain-{i}", gpus=1) for i in range(3)]
    sc.create(plain)
    sc.wait_bound([p["metadata"]["name"] for p in plain], timeout=60, what="three plain pods")
    assert calls(quorum) == before, "kube-scheduler called Quorum for pods that request no quorum.dev/member"
