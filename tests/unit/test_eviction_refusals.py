"""A gang is evicted all or none, whatever a PodDisruptionBudget says (``gang/evictions.py``).

Before any member of a gang is evicted (a requeue, or a victim of preemption) every member's
eviction is asked with a dry run; a refusal of any keeps the whole gang running and says why. A
real eviction refused after its dry run passed is tried again until the pod is gone.
"""

from __future__ import annotations

import asyncio

import pytest

from extender.gang import evictions

from .fixtures import schedule, typed
from .test_displacement import HIGH, low_gang_fills_rack_and_plain_pods_the_rest, proposals, settle
from .test_lifecycle import deliver, group_gang, lifecycle_world, ready
from .test_queue import QueueWorld

BUDGET = "ml/keep-g"


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals are tried again within milliseconds, not seconds."""
    monkeypatch.setattr(evictions, "REFUSAL_RETRY_SECONDS", 0.01)
    monkeypatch.setattr(evictions, "REFUSAL_RETRY_MAX_SECONDS", 0.02)


def refusal_notes(world: object, name: str) -> list[str]:
    return [note for regarding, _, reason, _, note in world.actions.events  # type: ignore[attr-defined]
            if regarding.name == name and reason == "EvictionRefused"]


async def test_a_requeue_with_one_protected_member_evicts_none_says_why_and_goes_ahead_once_lifted() -> None:
    world = lifecycle_world(pods_ready_timeout_seconds=0.05, backoff_base_seconds=60, backoff_jitter=0)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    world.actions.refuse_eviction.add("g1")
    world.actions.budgets["g1"] = BUDGET
    await asyncio.sleep(0.15)
    # Nothing evicted, the gang runs whole and is not backed off; the gang says which budget refused.
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") == "Bound"
    notes = refusal_notes(world, "g")
    assert notes and BUDGET in notes[0] and "none was evicted" in notes[0]
    assert BUDGET in world.coordinator.reason_of("ml/g")
    assert world.sample("quorum_evictions_total", result="dry-run-refused") >= 1
    assert "g0" in world.actions.dry_runs  # the other member was asked too, and left alone
    # The budget allows it now: the whole dry run is tried again and the gang goes, whole.
    world.actions.refuse_eviction.clear()
    await asyncio.sleep(0.1)
    assert sorted(world.actions.evicted) == names
    assert world.coordinator.phase_of("ml/g") == "Backoff"


async def test_a_requeue_no_longer_due_is_dropped_while_refused() -> None:
    """The gang turned Ready while a budget held its requeue off: nothing is evicted, ever."""
    world = lifecycle_world(pods_ready_timeout_seconds=0.05, backoff_base_seconds=60, backoff_jitter=0)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    world.actions.refuse_dry_run.add("g0")
    await asyncio.sleep(0.1)
    assert refusal_notes(world, "g")
    for name in names:
        deliver(world, ready(world.pods[name]))
    world.actions.refuse_dry_run.clear()
    await asyncio.sleep(0.1)
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") == "Bound"


async def test_a_real_eviction_refused_after_its_dry_run_is_tried_until_the_pod_is_gone() -> None:
    world = lifecycle_world(pods_ready_timeout_seconds=0.05, backoff_base_seconds=60, backoff_jitter=0)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    world.actions.refuse_real_eviction.add("g1")  # the budget changed between the dry run and the eviction
    await asyncio.sleep(0.6)
    assert world.actions.evicted == ["g0"]
    # Far more than the twelve attempts after which it used to be left running and forgotten.
    assert world.actions.refused.count("g1") > 12
    # Reported once (Event and metric); the gang's bookkeeping treats it as leaving.
    assert len(refusal_notes(world, "g1")) == 1
    assert world.sample("quorum_evictions_total", result="refused") == 1
    assert world.coordinator.phase_of("ml/g") == "Backoff"
    assert world.coordinator.registry.running_count("ml/g") == 0
    world.actions.refuse_real_eviction.clear()
    await asyncio.sleep(0.05)
    assert sorted(world.actions.evicted) == names


async def test_a_victim_gang_with_one_protected_member_is_spared_and_other_victims_are_chosen() -> None:
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.actions.refuse_eviction.add(low[1])
    world.actions.budgets[low[1]] = BUDGET
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    # Not one member of the protected gang is evicted; both it and the preemptor say why, and the
    # preemptor planned again at once: other victims (two plain pods of one rack).
    assert BUDGET in refusal_notes(world, "low")[0]
    assert "looking for other victims" in refusal_notes(world, "high")[0]
    evicted = world.actions.evicted
    assert len(evicted) == 2 and all(name.startswith("plain-") for name in evicted), evicted
    assert not set(low) & set(evicted)
    assert world.claim is not None and world.claim.gang == "ml/high"
    assert {world.rack_of(world.pods[name]["spec"]["nodeName"]) for name in evicted} == \
        {world.claim.domain.split("/")[1]}
    world.check()


async def test_kube_schedulers_own_victims_of_a_gang_still_being_asked_about_are_refused() -> None:
    """kube-scheduler deletes the victims /preempt lets through without asking their budgets: while
    the victim gang's dry runs are out, and once a budget spared it, /preempt lets none of its
    members through (the end-to-end run lost a protected gang's member this way)."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.actions.refuse_eviction.add(low[1])
    world.actions.budgets[low[1]] = BUDGET
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []  # the plan is made, the dry runs are asked
    proposed = proposals(world, low)
    assert world.coordinator.preempt(typed(world.pods["high0"])[0], proposed) == {}
    await settle()
    assert world.coordinator.preempt(typed(world.pods["high0"])[0], proposed) == {}
    assert not set(low) & set(world.actions.evicted)
    world.check()


async def test_a_preemption_choosing_a_gang_whose_requeue_a_budget_holds_off_hears_the_refusal() -> None:
    """The gang's own requeue (a readiness timeout) is being refused when a preemptor chooses it:
    the preemptor is told at once and plans with other victims (it used to wait on a requeue that
    never answered it, and the long stateful run found the victim gang left running)."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.actions.refuse_eviction.add(low[1])
    world.actions.budgets[low[1]] = BUDGET
    lifecycle, registry = world.coordinator.lifecycle, world.coordinator.registry
    lifecycle.requeue(registry.state("ml/low"), "gang ml/low: readiness timeout", "readiness-timeout",
                      due=lambda state: True)
    await settle()
    assert lifecycle.checking("ml/low") and refusal_notes(world, "low")
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []
    await settle()
    assert "looking for other victims" in refusal_notes(world, "high")[0]
    assert world.filter("high0").passing == []  # kube-scheduler tries the requeued preemptor again
    await settle()
    evicted = world.actions.evicted
    assert len(evicted) == 2 and all(name.startswith("plain-") for name in evicted), evicted
    world.check()


async def test_a_requeue_asked_during_a_preemptions_dry_run_outlives_the_preemptions_refusal() -> None:
    """A readiness timeout that fires while a preemption's dry run is out is not dropped: when the
    preemption gives the gang up, the requeue goes on being asked and evicts the gang once allowed."""
    world = QueueWorld(preemption=True, claim_after_seconds=3600, claim_on_priority=False)
    low = low_gang_fills_rack_and_plain_pods_the_rest(world)
    world.actions.refuse_eviction.add(low[1])
    world.group("high", 2, rack=True, priority=HIGH)
    assert world.filter("high0").passing == []  # the plan is made, the victim gang's dry runs are out
    lifecycle, registry = world.coordinator.lifecycle, world.coordinator.registry
    lifecycle.requeue(registry.state("ml/low"), "gang ml/low: readiness timeout", "readiness-timeout",
                      due=lambda state: True)
    await settle()
    assert "looking for other victims" in refusal_notes(world, "high")[0]
    assert not set(low) & set(world.actions.evicted)
    world.actions.refuse_eviction.clear()
    await asyncio.sleep(0.1)
    assert set(low) <= set(world.actions.evicted)
    world.check()
