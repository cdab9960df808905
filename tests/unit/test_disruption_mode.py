"""A native PodGroup's ``disruptionMode`` and ``preemptionPolicy`` in Quorum's preemption.

``Single``: the gang's running members are victims one by one (the owner accepts a gang left below
its quorum); ``All`` (and absent, and every other convention): the gang goes whole. A PodGroup
that says ``preemptionPolicy: Never`` displaces nothing, but is displaced like any other.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.cluster.conventions import spec_from_native_podgroup
from extender.cluster.records import DisruptionMode, PreemptionPolicy

from .fixtures import gang_pod, make_podgroup, typed
from .test_displacement import HIGH, proposals, settle
from .test_queue import QueueWorld

API = "scheduling.k8s.io/v1beta1"


@pytest.mark.parametrize(("raw", "expected"), [
    ({"single": {}}, DisruptionMode.SINGLE),
    ({"all": {}}, DisruptionMode.ALL),
    (None, DisruptionMode.ALL),  # absent: only objects older than 1.37's defaulting lack it
    ("Pod", DisruptionMode.SINGLE),  # 1.36 (v1alpha2) spelled the union as a string
    ("PodGroup", DisruptionMode.ALL),
])
def test_the_disruption_mode_is_read_from_the_union(raw: Any, expected: DisruptionMode) -> None:
    group = make_podgroup("g", 2)
    if raw is not None:
        group["spec"]["disruptionMode"] = raw
    assert spec_from_native_podgroup(group, API).disruption is expected


@pytest.mark.parametrize(("raw", "expected"), [
    ("Never", PreemptionPolicy.NEVER),
    ("PreemptLowerPriority", PreemptionPolicy.PREEMPT_LOWER_PRIORITY),
    (None, PreemptionPolicy.PREEMPT_LOWER_PRIORITY),
])
def test_the_preemption_policy_is_read(raw: str | None, expected: PreemptionPolicy) -> None:
    group = make_podgroup("g", 2)
    if raw is not None:
        group["spec"]["preemptionPolicy"] = raw
    assert spec_from_native_podgroup(group, API).preemption_policy is expected


def low_gang_across_two_racks(mode: str | None, priority: int = 10, group_policy: str | None = None,
                              honor: bool = True) -> tuple[QueueWorld, list[str]]:
    """Gang ml/low runs one member in each of racks b0-r0 and b0-r1 (their other node is free); the
    b1 racks are full at the preemptor's priority. A 2 x 8-GPU rack gang needs one node freed.
    ``honor``: the configuration honours a PodGroup's ``disruptionMode`` (off by default)."""
    world = QueueWorld(preemption=True, honor_disruption_mode=honor, claim_after_seconds=3600,
                       claim_on_priority=False)
    low = world.group("low", 2, priority=priority, nodes=["b0-r0-n1", "b0-r1-n1"], mode=mode,
                      group_policy=group_policy)
    for name in world.names:
        if name.startswith("b1-"):
            world.plain(f"keep-{name}", node=name, priority=HIGH)
    return world, low


async def test_a_single_mode_gang_loses_only_the_member_in_the_way() -> None:
    world, low = low_gang_across_two_racks("single")
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert len(world.actions.evicted) == 1 and world.actions.evicted[0] in low, world.actions.evicted
    assert "Preempted" not in world.actions.event_reasons("low")  # the gang itself is not requeued
    assert world.sample("quorum_preemptions_total", kind="pod") == 1
    assert world.sample("quorum_preemptions_total", kind="gang") == 0
    assert world.claim is not None and world.claim.gang == "ml/high"
    world.check()


@pytest.mark.parametrize("mode", ["all", None])
async def test_an_all_mode_gang_goes_whole(mode: str | None) -> None:
    world, low = low_gang_across_two_racks(mode)
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert sorted(world.actions.evicted) == sorted(low)
    assert "Preempted" in world.actions.event_reasons("low")
    assert world.sample("quorum_preemptions_total", kind="gang") == 1
    world.check()


async def test_by_default_a_single_mode_gang_goes_whole_all_the_same() -> None:
    """Unless the configuration honours it, ``single`` (what 1.37's apiserver fills in when a
    PodGroup names no mode) does not split a gang: Quorum's promise is whole gangs."""
    world, low = low_gang_across_two_racks("single", honor=False)
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert sorted(world.actions.evicted) == sorted(low)
    assert world.sample("quorum_preemptions_total", kind="gang") == 1
    world.plain("urgent", priority=HIGH)
    assert world.coordinator.preempt(typed(world.pods["urgent"])[0], proposals(world, ["low0"])) == {}


async def test_single_mode_members_rank_at_their_podgroups_priority() -> None:
    """The members' own priority is 0; their PodGroup's (the preemptor's) keeps them."""
    world, _ = low_gang_across_two_racks("single", priority=HIGH)
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert world.actions.evicted == []


async def test_a_podgroup_that_says_never_displaces_nothing() -> None:
    world, _ = low_gang_across_two_racks("single")
    world.group("high", 2, rack=True, priority=HIGH, group_policy="Never")  # its pods do not say Never
    assert world.filter("high0").passing == []
    await settle()
    assert world.actions.evicted == []
    assert world.coordinator.preempt(typed(world.pods["high0"])[0], proposals(world, ["low0"])) == {}
    assert world.actions.evicted == []


async def test_a_podgroup_that_says_never_is_still_displaced() -> None:
    world, low = low_gang_across_two_racks("all", group_policy="Never")
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert sorted(world.actions.evicted) == sorted(low)


async def test_an_extra_member_of_a_running_never_gang_evicts_nothing_through_preempt() -> None:
    """A running gang's extra member preempts like any pod, unless its PodGroup says Never."""
    for policy, kept in ((None, True), ("Never", False)):
        world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
        world.plain("victim", node="b0-r0-n0")
        world.group("run", 1, priority=HIGH, nodes=["b0-r0-n1"], group_policy=policy)
        world.add(gang_pod("run-extra", podgroup="run", gpus=8))
        proposed = proposals(world, ["victim"])
        assert bool(world.coordinator.preempt(typed(world.pods["run-extra"])[0], proposed)) is kept, policy


async def test_kube_schedulers_victims_may_take_a_single_mode_gang_below_its_quorum() -> None:
    """A plain pod's preemption may take a member of a gang running at its quorum only when the
    gang's owner allowed it (``Single``); an ``All`` gang at its quorum stays vetoed."""
    for mode, kept in (("single", True), ("all", False)):
        world, _ = low_gang_across_two_racks(mode)
        world.plain("urgent", priority=HIGH)
        proposed = proposals(world, ["low0"])
        assert world.coordinator.preempt(typed(world.pods["urgent"])[0], proposed) == (
            proposed if kept else {}), mode
