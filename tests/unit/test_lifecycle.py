"""After the bind: readiness timeout, recovery, requeue with backoff, deactivation, Events and
PodGroup conditions (``gang/lifecycle.py``, ``gang/reporting.py``)."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import replace
from typing import Any

from extender.cluster.gang_sources import (
    ANNOTATION_BACKOFF_UNTIL,
    ANNOTATION_DEACTIVATED,
    ANNOTATION_REQUEUES,
)
from extender.config import Config, Lifecycle
from extender.gang.coordinator import Coordinator
from extender.gang.effects import CONDITION_INITIALLY_SCHEDULED, CONDITION_PODS_READY, CONDITION_RECOVERING

from .fixtures import World, gang_pod, make_node, make_podgroup, schedule, typed

RACK_KEY = "topology.quorum.dev/rack"


class LifecycleWorld(World):
    """A World whose coordinator runs with given ``lifecycle`` settings, keeping every condition
    Quorum applied to each PodGroup (in order)."""

    def __init__(self, clock: Any = None, nodes_per_rack: int = 2, **fields: Any) -> None:
        if clock is None:
            super().__init__(nodes_per_rack=nodes_per_rack)
        else:
            super().__init__(nodes_per_rack=nodes_per_rack, clock=clock)
        self.cache.listeners.clear()
        config = replace(Config(), lifecycle=Lifecycle(**fields))
        kwargs: dict[str, Any] = {"strict": True}
        if clock is not None:
            kwargs["clock"] = clock
        self.coordinator = Coordinator(config, self.cache, self.actions, self.metrics, **kwargs)
        self.applied: dict[str, list[tuple[str, bool]]] = {}
        record = self.actions.set_gang_conditions

        async def keep(home: Any, conditions: list[Any]) -> None:
            self.applied.setdefault(f"{home.namespace}/{home.name}", []).extend(
                (c.type, c.status) for c in conditions)
            await record(home, conditions)
        self.actions.set_gang_conditions = keep  # type: ignore[method-assign]


lifecycle_world = LifecycleWorld


def ready(obj: dict[str, Any], phase: str = "Running", is_ready: bool = True) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["status"]["phase"] = phase
    out["status"]["conditions"] = [{"type": "Ready", "status": "True" if is_ready else "False"}]
    return out


def deliver(world: World, obj: dict[str, Any]) -> None:
    world.pods[obj["metadata"]["name"]] = obj
    world.cache.upsert_pod(obj)


def group_gang(world: World, name: str, count: int, rack: bool = False, start: int = 0) -> list[str]:
    if f"ml/{name}" not in world.cache.podgroup_specs:
        world.cache.upsert_podgroup(make_podgroup(name, count, topology_key=RACK_KEY if rack else None))
    names = [f"{name}{i}" for i in range(start, start + count)]
    for pod_name in names:
        world.add(gang_pod(pod_name, podgroup=name, gpus=8))
    return names


def drop(world: World, names: list[str]) -> None:
    """The evicted pods go, as the watch reports them."""
    for pod_name in names:
        world.cache.delete_pod(world.pods.pop(pod_name))


def podgroup_with(world: World, name: str, count: int, annotations: dict[str, str]) -> dict[str, Any]:
    obj = make_podgroup(name, count)
    obj["metadata"]["annotations"] = dict(annotations)
    world.cache.upsert_podgroup(obj)
    return obj


def node_goes_unknown(world: World, name: str) -> None:
    """The node's Ready condition turns Unknown (its kubelet stopped reporting)."""
    node = world.cache.nodes[name]
    sick = make_node(node.name, *node.domains[:2])
    sick["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    world.cache.upsert_node(sick)


# ------------------------------------------------------------------ readiness
async def test_a_gang_never_ready_is_evicted_whole_and_backed_off_after_the_timeout() -> None:
    world = lifecycle_world(pods_ready_timeout_seconds=0.05, backoff_base_seconds=60, backoff_jitter=0)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    assert world.coordinator.phase_of("ml/g") == "Bound"
    await asyncio.sleep(0.15)
    assert sorted(world.actions.evicted) == names
    assert world.coordinator.phase_of("ml/g") == "Backoff"
    assert 59 < world.coordinator.backoff_left("ml/g") <= 60
    assert "0 of 2 members Ready within 0.05s" in world.coordinator.reason_of("ml/g")
    assert world.actions.annotations["ml/g"][ANNOTATION_REQUEUES] == "1"
    assert float(world.actions.annotations["ml/g"][ANNOTATION_BACKOFF_UNTIL]) > 0
    assert world.sample("quorum_gang_requeues_total", reason="readiness-timeout") == 1
    reasons = world.actions.event_reasons("g")
    assert reasons.index("Bound") < reasons.index("Requeued") < reasons.index("BackOff")
    assert ("quorum.dev/PodsReady", False) in _conditions(world, "ml/g")


async def test_a_requeue_evicts_a_member_quorum_bound_before_the_watch_ever_showed_it() -> None:
    """An extra member kube-scheduler sent straight from its queue, bound by Quorum while the pod
    watch lags, is evicted with the others: the gang never runs in part (found by the stateful
    test with the watch held back: the requeue left that member running alone)."""
    world = lifecycle_world(pods_ready_timeout_seconds=0.05, backoff_base_seconds=60, backoff_jitter=0)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    late = gang_pod("g2", podgroup="g", gpus=8)  # its creation has not reached the cache
    world.pods["g2"] = late
    passing = world.coordinator.filter(*typed(late), world.names).passing
    assert passing and await world.bind("g2", passing[0]) == ""
    assert world.coordinator.registry.running_count("ml/g") == 3
    await asyncio.sleep(0.15)
    assert sorted(world.actions.evicted) == ["g0", "g1", "g2"]
    assert world.coordinator.phase_of("ml/g") == "Backoff"
    assert world.coordinator.registry.running_count("ml/g") == 0
    assert world.coordinator.check_invariants() == []


async def test_a_gang_ready_in_time_keeps_running_and_says_so() -> None:
    world = lifecycle_world(pods_ready_timeout_seconds=0.05)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    for pod_name in names:
        deliver(world, ready(world.pods[pod_name]))
    await asyncio.sleep(0.15)
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") == "Bound"
    assert "PodsReady" in world.actions.event_reasons("g")
    assert (CONDITION_PODS_READY, True) in _conditions(world, "ml/g")
    assert (CONDITION_INITIALLY_SCHEDULED, True) in _conditions(world, "ml/g")


async def test_a_per_gang_annotation_overrides_the_readiness_timeout() -> None:
    world = lifecycle_world()  # off in the configuration
    obj = make_podgroup("g", 2)
    obj["metadata"]["annotations"] = {"quorum.dev/pods-ready-timeout-seconds": "0.05"}
    world.cache.upsert_podgroup(obj)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    await asyncio.sleep(0.15)
    assert sorted(world.actions.evicted) == names


async def test_the_readiness_timeout_is_off_by_default() -> None:
    world = lifecycle_world()
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    await asyncio.sleep(0.1)
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") == "Bound"


# ------------------------------------------------------------------ requeue limit, restart
async def test_past_the_requeue_limit_the_gang_is_deactivated_until_the_annotation_goes() -> None:
    world = lifecycle_world(pods_ready_timeout_seconds=0.03, backoff_base_seconds=0.01, backoff_limit_count=1)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    await asyncio.sleep(0.1)
    assert world.coordinator.phase_of("ml/g") in ("Backoff", "Pending")
    drop(world, names)
    podgroup_with(world, "g", 2, world.actions.annotations["ml/g"])  # the watch shows Quorum's write
    names = group_gang(world, "g", 2, start=2)  # the Job's replacements
    await asyncio.sleep(0.05)
    await schedule(world, names)
    await asyncio.sleep(0.1)
    assert world.coordinator.phase_of("ml/g") == "Deactivated"
    assert sorted(world.actions.evicted) == ["g0", "g1", "g2", "g3"]
    deactivated = world.actions.annotations["ml/g"][ANNOTATION_DEACTIVATED]
    assert "deactivated after 1 requeue(s)" in deactivated
    drop(world, names)
    group = podgroup_with(world, "g", 2, world.actions.annotations["ml/g"])
    replacements = group_gang(world, "g", 2, start=4)
    decision = world.filter(replacements[0])
    assert decision.passing == []
    assert "remove the quorum.dev/deactivated annotation" in next(iter(decision.unresolvable.values()))
    group["metadata"]["annotations"].pop(ANNOTATION_DEACTIVATED)
    world.cache.upsert_podgroup(group)  # a user reactivates it
    assert world.coordinator.phase_of("ml/g") != "Deactivated"
    assert world.filter(replacements[0]).passing


async def test_a_restarted_quorum_resumes_the_requeue_count_and_the_backoff() -> None:
    now = [1000.0]
    world = lifecycle_world(clock=lambda: now[0], pods_ready_timeout_seconds=0.03,
                            backoff_base_seconds=100, backoff_jitter=0)
    world.coordinator.core.wall = lambda: now[0] + 5_000.0
    podgroup_with(world, "g", 2, {ANNOTATION_REQUEUES: "2", ANNOTATION_BACKOFF_UNTIL: str(now[0] + 5_030.0)})
    assert world.coordinator.phase_of("ml/g") == "Backoff"  # before any of its pods is seen
    assert 29 < world.coordinator.backoff_left("ml/g") <= 30
    names = group_gang(world, "g", 2)
    assert world.filter(names[0]).passing == []
    now[0] += 31
    world.coordinator.core.wall = lambda: now[0] + 5_000.0
    await schedule(world, names)
    await asyncio.sleep(0.1)
    assert world.actions.annotations["ml/g"][ANNOTATION_REQUEUES] == "3"
    assert 399 < world.coordinator.backoff_left("ml/g") <= 400  # 100 * 2^(3-1)


# ------------------------------------------------------------------ recovery
async def test_a_failed_member_is_replaced_in_the_gangs_rack_and_the_gang_recovers() -> None:
    world = lifecycle_world(recovery_timeout_seconds=5)
    names = group_gang(world, "g", 2, rack=True)
    nodes = await schedule(world, names)
    rack = world.rack_of(nodes["g0"])
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    await asyncio.sleep(0)
    assert (CONDITION_RECOVERING, True) in _conditions(world, "ml/g")
    replacement = group_gang(world, "g", 1, start=2)
    placed = await schedule(world, replacement)
    assert world.rack_of(placed["g2"]) == rack
    assert world.coordinator.phase_of("ml/g") == "Bound"
    await asyncio.sleep(0)
    assert (CONDITION_RECOVERING, False) in _conditions(world, "ml/g")
    reasons = world.actions.event_reasons("g")
    # Its own reason: a second identical "Bound" would fold into the first bind's Event.
    assert reasons[reasons.index("Recovering"):][-1] == "Recovered", reasons


async def test_a_recovering_gang_says_what_it_lost_not_what_it_last_did() -> None:
    """Entering Recovering from a member's loss gave no reason of its own: the Warning Event, the
    condition and the phase reason kept the gang's last one ("member ml/g2 bound")."""
    world = lifecycle_world(nodes_per_rack=3)
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    expected = "gang ml/g: 2 of 3 members running, members lost"
    assert world.coordinator.reason_of("ml/g") == expected
    notes = [note for _, _, reason, _, note in world.actions.events if reason == "Recovering"]
    assert notes == [expected]


async def test_a_gang_that_does_not_recover_in_time_is_requeued_whole() -> None:
    world = lifecycle_world(recovery_timeout_seconds=0.05, backoff_base_seconds=60)
    names = group_gang(world, "g", 3)
    await schedule(world, names)
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    await asyncio.sleep(0.15)
    assert sorted(world.actions.evicted) == ["g1", "g2"]
    assert world.coordinator.phase_of("ml/g") == "Backoff"
    assert "not recovered within 0.05s (2 of 3 members running)" in world.coordinator.reason_of("ml/g")


async def test_members_on_a_deleted_node_are_removed_and_the_gang_recovers_elsewhere_in_its_rack() -> None:
    world = lifecycle_world(nodes_per_rack=3)
    names = group_gang(world, "g", 2, rack=True)
    nodes = await schedule(world, names)
    gone = nodes["g0"]
    world.cache.delete_node(gone)
    await asyncio.sleep(0.01)
    stranded = [n for n in names if nodes[n] == gone]
    assert sorted(world.actions.evicted) == stranded
    drop(world, stranded)
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    replacements = group_gang(world, "g", len(stranded), start=2)
    placed = await schedule(world, replacements)
    assert all(world.rack_of(n) == world.rack_of(nodes["g1"]) for n in placed.values())
    assert gone not in placed.values()
    assert world.coordinator.phase_of("ml/g") == "Bound"


async def replacement_finds_its_rack_full(world: World) -> None:
    """A rack gang of 2 loses a member with its node, and the rest of its rack: the replacement
    the owner creates cannot join the survivor."""
    names = group_gang(world, "g", 2, rack=True)
    nodes = await schedule(world, names)
    rack = world.rack_of(nodes["g0"])
    for node in [n for n in world.names if world.rack_of(n) == rack and n not in nodes.values()]:
        world.cache.delete_node(node)
    world.cache.delete_node(nodes["g0"])
    await asyncio.sleep(0.01)
    drop(world, ["g0"])
    replacement = group_gang(world, "g", 1, start=2)
    assert world.filter(replacement[0]).passing == []
    await asyncio.sleep(0.01)


async def test_replacements_that_no_longer_fit_the_rack_re_place_the_whole_gang() -> None:
    world = lifecycle_world(replace_outside_domain=True)
    await replacement_finds_its_rack_full(world)
    assert "g1" in world.actions.evicted  # the survivor goes too: the gang starts afresh
    assert world.sample("quorum_gang_requeues_total", reason="replace") == 1


async def test_a_member_that_succeeded_is_no_failure() -> None:
    world = lifecycle_world(recovery_timeout_seconds=0.03)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    deliver(world, ready(world.pods["g0"], phase="Succeeded", is_ready=False))
    await asyncio.sleep(0.1)
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") != "Recovering"


# ------------------------------------------------------------------ Events for annotation gangs
async def test_annotation_gangs_report_on_their_first_member() -> None:
    world = lifecycle_world()
    for i in range(2):
        world.add(gang_pod(f"a{i}", gang="a", min_count=2, gpus=8))
    await schedule(world, ["a0", "a1"])
    assert "Bound" in world.actions.event_reasons("a0")
    assert world.actions.event_reasons("a1") == []
    assert world.actions.conditions == {}  # no PodGroup to carry conditions


def _conditions(world: World, key: str) -> set[tuple[str, bool]]:
    """Every (type, status) Quorum applied to the PodGroup, over all its writes."""
    assert isinstance(world, LifecycleWorld)
    return set(world.applied.get(key, []))


async def test_by_default_replacements_wait_for_room_in_the_rack_and_nothing_is_evicted() -> None:
    world = lifecycle_world()
    await replacement_finds_its_rack_full(world)
    assert world.actions.evicted == ["g0"]  # only the member on the deleted node
    assert world.coordinator.phase_of("ml/g") == "Recovering"


async def test_a_per_gang_annotation_sets_the_recovery_timeout() -> None:
    world = lifecycle_world()
    obj = make_podgroup("g", 2)
    obj["metadata"]["annotations"] = {"quorum.dev/recovery-timeout-seconds": "0.05"}
    world.cache.upsert_podgroup(obj)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    await asyncio.sleep(0.15)
    assert world.actions.evicted == ["g1"]
    assert world.sample("quorum_gang_requeues_total", reason="recovery-timeout") == 1


async def test_a_member_still_terminating_on_a_deleted_node_does_not_unpin_the_gangs_rack() -> None:
    """Its pod object lingers (a finalizer) after Quorum removed it; the survivor alone pins the rack."""
    world = lifecycle_world()
    names = group_gang(world, "g", 2, rack=True)
    nodes = await schedule(world, names)
    world.cache.delete_node(nodes["g0"])
    await asyncio.sleep(0.01)
    terminating = copy.deepcopy(world.pods["g0"])
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deliver(world, terminating)
    replacement = group_gang(world, "g", 1, start=2)
    decision = world.filter(replacement[0])
    assert [world.rack_of(n) for n in decision.passing] in ([], [world.rack_of(nodes["g1"])])


async def test_an_annotation_gang_keeps_its_requeue_count_on_its_members_across_a_restart() -> None:
    world = lifecycle_world(pods_ready_timeout_seconds=0.03, backoff_base_seconds=100, backoff_jitter=0)
    for i in range(2):
        world.add(gang_pod(f"a{i}", gang="a", min_count=2, gpus=8))
    await schedule(world, ["a0", "a1"])
    await asyncio.sleep(0.1)
    assert sorted(world.actions.evicted) == ["a0", "a1"]
    drop(world, ["a0", "a1"])
    for i in (2, 3):  # the owner's replacements: each gets the gang's bookkeeping
        world.add(gang_pod(f"a{i}", gang="a", min_count=2, gpus=8))
    await asyncio.sleep(0)
    assert world.actions.pod_annotations["ml/a2"][ANNOTATION_REQUEUES] == "1"
    assert "ml/a0" not in world.actions.pod_annotations  # members being evicted are left alone
    # A new Quorum process lists the stamped pods: the gang is still backing off, count 1.
    restarted = lifecycle_world(pods_ready_timeout_seconds=0.03, backoff_base_seconds=100, backoff_jitter=0)
    for name in ("a2", "a3"):
        obj = copy.deepcopy(world.pods[name])
        obj["metadata"]["annotations"].update(world.actions.pod_annotations[f"ml/{name}"])
        restarted.add(obj)
    assert restarted.filter("a2").passing == []
    assert restarted.coordinator.phase_of("ml/a") == "Backoff"
    assert 95 < restarted.coordinator.backoff_left("ml/a") <= 100


async def test_a_ready_gang_whose_node_goes_not_ready_recovers_or_is_requeued_whole() -> None:
    world = lifecycle_world(recovery_timeout_seconds=0.05, backoff_base_seconds=60)
    names = group_gang(world, "g", 2)
    nodes = await schedule(world, names)
    for pod_name in names:
        deliver(world, ready(world.pods[pod_name]))
    assert world.coordinator.phase_of("ml/g") == "Bound"
    node_goes_unknown(world, nodes["g0"])  # its pods still say Ready: the node's condition decides
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    assert world.coordinator.reason_of("ml/g") == "gang ml/g: 1 of 2 members Ready, readiness lost"
    await asyncio.sleep(0.15)
    assert sorted(world.actions.evicted) == sorted(names)
    assert world.coordinator.phase_of("ml/g") == "Backoff"


async def test_a_recovering_gang_whose_member_succeeds_keeps_its_replacements_reservation() -> None:
    """Found by the devices' stateful test at 10,000 examples: a recovering gang reserved a
    replacement, then another member succeeded. A finishing gang is not recovered, so the facts
    said Reserved, a move from Recovering the state machine did not allow (strict: it raised)."""
    world = lifecycle_world(recovery_timeout_seconds=30)
    names = group_gang(world, "g", 2)
    await schedule(world, names)
    deliver(world, ready(world.pods["g0"], phase="Failed", is_ready=False))
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    replacement = group_gang(world, "g", 1, start=2)
    assert world.filter(replacement[0]).passing  # reserved for the replacement
    deliver(world, ready(world.pods["g1"], phase="Succeeded", is_ready=False))
    assert world.coordinator.phase_of("ml/g") == "Reserved"
    assert world.coordinator.check_invariants() == []


# ------------------------------------------------------------------ Kueue owns readiness
def kueue_gang(world: World, name: str, count: int) -> list[str]:
    """A gang whose pods Kueue admitted (its pod set label on each)."""
    names = group_gang(world, name, count)
    for pod_name in names:
        world.pods[pod_name]["metadata"].setdefault("labels", {})["kueue.x-k8s.io/podset"] = "main"
        world.cache.upsert_pod(world.pods[pod_name])
    return names


async def test_a_kueue_admitted_gang_never_ready_is_left_to_kueue() -> None:
    """Kueue's waitForPodsReady evicts the whole workload on its own timeout: Quorum's readiness
    deadline stands back, so that the two never both requeue the same gang (docs/kueue.md)."""
    world = lifecycle_world(pods_ready_timeout_seconds=0.05, backoff_base_seconds=60, backoff_jitter=0)
    names = kueue_gang(world, "g", 2)
    await schedule(world, names)
    await asyncio.sleep(0.15)
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") == "Bound"
    assert world.sample("quorum_gang_requeues_total", reason="readiness-timeout") == 0
    assert "LeftToKueue" in world.actions.event_reasons("g")


async def test_a_kueue_admitted_gang_losing_a_node_is_left_to_kueue() -> None:
    world = lifecycle_world(recovery_timeout_seconds=0.05, backoff_base_seconds=60)
    names = kueue_gang(world, "g", 2)
    nodes = await schedule(world, names)
    for pod_name in names:
        deliver(world, ready(world.pods[pod_name]))
    node_goes_unknown(world, nodes["g0"])
    assert world.coordinator.phase_of("ml/g") == "Recovering"
    await asyncio.sleep(0.15)
    assert world.actions.evicted == []
    assert world.coordinator.phase_of("ml/g") == "Recovering"
