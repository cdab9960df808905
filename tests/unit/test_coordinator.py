"""Gang semantics of the coordinator: quorum gate, whole-gang placement, reservation protection,
bind hold, timeout and backoff, release, extras, scoring and preemption."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from extender.config import GangTimings
from extender.gang.coordinator import RECHECK_DELAY_SECONDS, STALE_ANSWER_WINDOW_SECONDS

from .fixtures import RACK, World, gang_of, gang_pod, make_node, make_podgroup, typed

# ---------------------------------------------------------------------------------- quorum gate


async def test_quorum_gate_rejects_every_node_until_min_count_pods_exist() -> None:
    world = World()
    gang_of(world, 3, min_count=8)
    decision = world.filter("w0")
    assert decision.passing == []
    assert set(decision.unresolvable) == set(world.names)
    assert decision.unresolvable["b0-r0-n0"] == "gang ml/w: 3/8 pods exist, waiting for 5"
    assert world.coordinator.reserved_count()[""] == 0


async def test_gated_members_do_not_count_towards_quorum_nor_get_reserved() -> None:
    world = World()
    gang_of(world, 3, min_count=4)
    gated = gang_pod("w3", gang="w", min_count=4)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/queue"}]
    world.add(gated)
    reason = world.filter("w0").unresolvable["b0-r0-n0"]
    assert reason == "gang ml/w: 3/4 pods exist (1 held by scheduling gates), waiting for 1"
    assert world.coordinator.reserved_count()[""] == 0
    del gated["spec"]["schedulingGates"]  # the queueing controller admits it
    world.cache.upsert_pod(gated)
    assert len(world.filter("w0").passing) == 1
    assert "uid-w3" in world.coordinator.reservation_of("ml/w")


async def test_member_seen_by_the_scheduler_before_the_watch_counts_itself() -> None:
    world = World()
    gang_of(world, 3, min_count=4)
    last = gang_pod("w3", gang="w", min_count=4)  # kube-scheduler has it; our watch has not delivered it
    decision = world.coordinator.filter(*typed(last), world.names)
    assert len(decision.passing) == 1
    assert set(world.coordinator.reservation_of("ml/w")) == {"uid-w0", "uid-w1", "uid-w2", "uid-w3"}


# ------------------------------------------------------------------ answers given from a lagging watch


async def settle() -> None:
    await asyncio.sleep(RECHECK_DELAY_SECONDS + 0.05)


async def test_no_fit_answered_before_the_watch_saw_capacity_freed_is_retried_once() -> None:
    world = World()
    # Rack b0-r0 is full; every other rack has 4 of its 16 GPUs free: a 16-GPU gang fits nowhere.
    for i, name in enumerate(world.names):
        used = 8 if name.startswith("b0-r0") or name.endswith("n0") else 4
        world.add(gang_pod(f"busy{i}", gpus=used, node_name=name))
    gang_of(world, 4, min_count=4, gpus=4, required="rack")
    assert world.filter("w0").passing == []
    assert world.filter("w1").passing == []  # answered from the cached no-fit
    await settle()
    assert world.actions.requeued == []  # nothing changed: nobody is nudged
    # kube-scheduler saw rack b0-r0 emptied and retried at once; our watch delivers it only now.
    world.cache.delete_pod(world.pods["busy0"])
    world.cache.delete_pod(world.pods["busy1"])
    await settle()
    assert world.actions.requeued == ["w0"]  # one member: its placement wakes the rest
    assert world.sample("quorum_gang_rechecks_total") == 1
    assert len(world.filter("w0").passing) == 1
    await asyncio.sleep(0)
    assert sorted(world.actions.requeued) == ["w0", "w1"]  # w2, w3 were never turned away


async def test_unknown_required_level_is_reported_and_not_retried_on_every_change() -> None:
    world = World()
    world.add(gang_pod("busy", gpus=8, node_name="b0-r0-n0"))
    gang_of(world, 2, min_count=2, required="row")
    reason = world.filter("w0").unresolvable["b0-r0-n1"]
    assert reason == "gang ml/w: required topology 'row' is not a configured level (block, rack, host)"
    world.cache.delete_pod(world.pods["busy"])
    await settle()
    assert world.actions.requeued == []  # freed capacity cannot fix a configuration error


async def test_rejections_older_than_the_window_are_left_to_the_scheduler() -> None:
    now = [1000.0]
    world = World(clock=lambda: now[0])
    for i, name in enumerate(world.names):
        world.add(gang_pod(f"busy{i}", gpus=8, node_name=name))
    gang_of(world, 2, min_count=2, gpus=4)
    assert world.filter("w0").passing == []
    now[0] += STALE_ANSWER_WINDOW_SECONDS + 1
    world.cache.delete_pod(world.pods["busy0"])
    await settle()
    assert world.actions.requeued == []


async def test_gang_rejected_for_missing_members_is_retried_when_the_last_one_arrives() -> None:
    world = World()
    gang_of(world, 3, min_count=4)
    assert world.filter("w0").passing == []
    await settle()
    assert world.actions.requeued == []
    world.add(gang_pod("w3", gang="w", min_count=4))
    await settle()
    assert world.actions.requeued == ["w0"]
    assert world.sample("quorum_gang_rechecks_total") == 1


async def test_gang_rejections_are_unresolvable_so_they_never_trigger_preemption() -> None:
    world = World()
    gang_of(world, 1, min_count=2)
    decision = world.filter("w0")
    assert decision.failed == {}
    assert decision.unresolvable


async def test_pod_group_without_object_waits_for_it() -> None:
    world = World()
    world.add(gang_pod("p0", podgroup="trainer"))
    decision = world.filter("p0")
    assert decision.passing == []
    assert "waiting for its PodGroup" in decision.unresolvable["b0-r0-n0"]


async def test_invalid_min_count_annotation_is_reported_not_guessed() -> None:
    world = World()
    obj = gang_pod("w0", gang="w", min_count=None)
    obj["metadata"]["annotations"]["quorum.dev/min-count"] = "eight"
    world.add(obj)
    decision = world.filter("w0")
    assert decision.passing == []
    reason = "gang ml/w: quorum.dev/min-count 'eight' is not a positive integer (annotations)"
    assert decision.unresolvable["b0-r0-n0"] == reason
    # The gang is visible as Misconfigured, with the same reason (it had no phase at all before).
    assert world.coordinator.phase_of("ml/w") == "Misconfigured"
    assert world.coordinator.reason_of("ml/w") == reason
    assert {g["gang"]: g["phase"] for g in world.coordinator.snapshot()} == {"ml/w": "Misconfigured"}


# ---------------------------------------------------------------------------------- placement


async def test_first_member_places_the_whole_gang_in_one_rack_and_each_member_gets_its_node() -> None:
    world = World()
    names = gang_of(world, 4, min_count=4, gpus=4, required="rack")
    first = world.filter("w0")
    assert len(first.passing) == 1
    reservation = world.coordinator.reservation_of("ml/w")
    assert len(reservation) == 4
    racks = {world.rack_of(n) for n in reservation.values()}
    assert len(racks) == 1
    for name in names:
        decision = world.filter(name)
        assert decision.passing == [reservation[f"uid-{name}"]]
    # Quorum never turned the others away: they come to filter on their own, with no write.
    await asyncio.sleep(0.01)
    assert world.actions.requeued == []
    assert world.sample("quorum_placements_total", result="fit") == 1


async def test_only_members_turned_away_before_the_placement_are_nudged_when_it_is_reserved() -> None:
    """kube-scheduler parks a pod Quorum answered with no node until a cluster event; a nudge (one
    apiserver write) is owed to those members only, not to every member of every gang."""
    world = World()
    gang_of(world, 2, min_count=4, gpus=4)
    assert world.filter("w0").passing == [] and world.filter("w1").passing == []  # 2 of 4 exist
    for name in ("w2", "w3"):
        world.add(gang_pod(name, gang="w", min_count=4, gpus=4))
    assert len(world.filter("w2").passing) == 1  # the whole gang is placed now
    await asyncio.sleep(0.01)
    assert sorted(world.actions.requeued) == ["w0", "w1"]  # not w3, which was never answered


async def test_a_nudge_is_dropped_for_a_member_bound_or_binding_before_it_is_sent() -> None:
    """Nudges wait for a write slot behind Events and status writes; a member kube-scheduler tried
    on its own meanwhile and that was bound (or is being bound) gets no pod update it does not need."""
    world = World()
    gang_of(world, 2, min_count=4, gpus=4)
    assert world.filter("w0").passing == [] and world.filter("w1").passing == []  # 2 of 4 exist
    for name in ("w2", "w3"):
        world.add(gang_pod(name, gang="w", min_count=4, gpus=4))
    assert len(world.filter("w2").passing) == 1  # placed: w0 and w1 are owed a nudge
    reservation = world.coordinator.reservation_of("ml/w")
    world.bind_in_cache("w0", reservation["uid-w0"])  # the watch shows w0 bound first
    ledger = world.coordinator.core.ledger
    ledger.mark_inflight("uid-w1", reservation["uid-w1"], world.cache.pods["uid-w1"].requests)
    await asyncio.sleep(0.01)
    assert world.actions.requeued == []
    ledger.clear_inflight("uid-w1")  # that bind failed: w1 waits again
    world.coordinator.retry.nudge_gang("ml/w", "test")
    await asyncio.sleep(0.01)
    assert world.actions.requeued == ["w1"]


async def test_pods_of_another_schedulers_profile_are_never_written_to() -> None:
    """Quorum sees every gang (capacity is shared), but a gang kube-scheduler's own gang plugin
    schedules under another profile is none of its business: no nudge, even after a restart."""
    world = World()
    world.coordinator.core.config = replace(world.coordinator.core.config, scheduler_names=("quorum",))
    for i in range(2):
        member = world.add(gang_pod(f"n{i}", gang="n", min_count=2, gpus=4))
        member["spec"]["schedulerName"] = "native"
        world.cache.upsert_pod(member)
    world.coordinator.retry.nudge_waiting_after_sync()
    world.coordinator.retry.nudge_gang("ml/n", "its PodGroup changed")
    await asyncio.sleep(0.01)
    assert world.actions.requeued == []


async def test_after_a_restart_every_pending_member_may_be_parked_and_is_nudged() -> None:
    world = World()
    gang_of(world, 4, min_count=4, gpus=4)
    world.coordinator.retry.nudge_waiting_after_sync()  # what the previous instance said is unknown
    await asyncio.sleep(0.01)
    assert world.actions.requeued == ["w0"]  # one member, whose placement wakes the rest
    assert len(world.filter("w0").passing) == 1
    await asyncio.sleep(0.01)
    assert sorted(world.actions.requeued) == ["w0", "w1", "w2", "w3"]


async def test_podgroup_min_count_and_topology_come_from_the_native_object() -> None:
    world = World()
    world.cache.upsert_podgroup(make_podgroup("trainer", 3, topology_key=RACK))
    for i in range(3):
        world.add(gang_pod(f"t{i}", podgroup="trainer", gpus=2))
    decision = world.filter("t0")
    assert len(decision.passing) == 1
    reservation = world.coordinator.reservation_of("ml/trainer")
    assert len({world.rack_of(n) for n in reservation.values()}) == 1


async def test_gang_that_does_not_fit_reserves_nothing_and_names_the_shortfall() -> None:
    world = World()
    # 16 GPUs per rack; 5 x 4 GPUs cannot fit in one rack.
    gang_of(world, 5, min_count=5, gpus=4, required="rack")
    decision = world.filter("w0")
    assert decision.passing == []
    reason = decision.unresolvable["b0-r0-n0"]
    assert reason.startswith("gang ml/w needs 5 × {")
    assert "nvidia.com/gpu: 4" in reason
    assert "best rack fits 4" in reason
    assert world.coordinator.reserved_count()[""] == 0
    assert world.coordinator.reserved_nodes() == []


async def test_no_fit_is_not_recomputed_for_each_member_until_something_changes() -> None:
    world = World()
    gang_of(world, 5, min_count=5, gpus=4, required="rack")
    for name in ("w0", "w1", "w2", "w3"):
        world.filter(name)
        # kube-scheduler records each rejection in the pod's status: not a capacity change.
        world.pods[name]["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
        world.cache.upsert_pod(world.pods[name])
    assert world.sample("quorum_placements_total", result="nofit") == 1
    world.cache.upsert_node(make_node("b9-r9-n9", "b9", "b9-r9", gpus=64))
    world.names.append("b9-r9-n9")
    decision = world.filter("w4")
    assert len(decision.passing) == 1
    assert world.sample("quorum_placements_total", result="nofit") == 1
    assert world.sample("quorum_placements_total", result="fit") == 1


async def test_no_fit_holds_only_for_the_nodes_it_was_computed_against() -> None:
    world = World()
    gang_of(world, 4, min_count=4, gpus=4, required="rack")
    # kube-scheduler's cache still counts pods on b0-r0-n1 that Quorum has seen deleted: it offers
    # only part of the rack, then the whole cluster once its own watch catches up.
    partial = [n for n in world.names if n != "b0-r0-n1" and not n.startswith(("b0-r1", "b1"))]
    assert world.filter("w0", partial).passing == []
    assert "best rack fits 2" in world.filter("w1", partial).unresolvable["b0-r0-n0"]
    assert world.filter("w2", partial[::-1]).passing == []  # same nodes, another starting point
    assert world.sample("quorum_placements_total", result="nofit") == 1  # cached for the same nodes
    assert len(world.filter("w1", list(reversed(world.names))).passing) == 1
    assert world.sample("quorum_placements_total", result="fit") == 1


async def test_placement_uses_only_the_nodes_kube_scheduler_passed() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8)
    allowed = ["b1-r1-n0", "b1-r1-n1"]
    decision = world.filter("w0", allowed)
    assert decision.passing[0] in allowed
    assert set(world.coordinator.reservation_of("ml/w").values()) == set(allowed)


async def test_required_level_with_members_already_bound_stays_in_their_domain() -> None:
    world = World()
    world.add(gang_pod("w0", gang="w", min_count=3, gpus=1, required="rack", node_name="b1-r0-n1"))
    world.add(gang_pod("w1", gang="w", min_count=3, gpus=1, required="rack"))
    world.add(gang_pod("w2", gang="w", min_count=3, gpus=1, required="rack"))
    world.filter("w1")
    reservation = world.coordinator.reservation_of("ml/w")
    assert {world.rack_of(n) for n in reservation.values()} == {"b1-r0"}


# ---------------------------------------------------------------------------------- protection


async def test_plain_pods_and_other_gangs_are_kept_off_reserved_capacity() -> None:
    world = World()
    gang_of(world, 2, min_count=2, gpus=8, required="rack")
    world.filter("w0")
    reserved_nodes = set(world.coordinator.reservation_of("ml/w").values())
    world.add(gang_pod("plain", gpus=1))
    decision = world.filter("plain")
    assert set(decision.unresolvable) == reserved_nodes
    assert decision.unresolvable[next(iter(reserved_nodes))] == "capacity reserved for gang ml/w"
    assert set(decision.passing) == set(world.names) - reserved_nodes
    # A second gang is placed around the first one's reservation, never on it.
    gang_of(world, 2, min_count=2, gpus=8, prefix="v")
    world.filter("v0")
    assert not set(world.coordinator.reservation_of("ml/v").values()) & reserved_nodes


async def test_plain_pod_that_fits_beside_a_partial_reservation_passes() -> None:
    world = World()
    gang_of(world, 1, min_count=1, gpus=4)
    world.filter("w0")
    reserved = next(iter(world.coordinator.reservation_of("ml/w").values()))
    world.add(gang_pod("small", gpus=4))
    world.add(gang_pod("large", gpus=5))
    assert reserved in world.filter("small").passing
    assert reserved in world.filter("large").unresolvable


# ---------------------------------------------------------------------------------- bind hold


async def test_binds_are_held_until_quorum_then_all_bound_together() -> None:
    world = World()
    names = gang_of(world, 3, min_count=3, gpus=2)
    world.filter("w0")
    reservation = world.coordinator.reservation_of("ml/w")
    nodes = {n: reservation[f"uid-{n}"] for n in names}
    first = asyncio.create_task(world.bind("w0", nodes["w0"]))
    second = asyncio.create_task(world.bind("w1", nodes["w1"]))
    await asyncio.sleep(0.01)
    assert not first.done() and not second.done()
    assert world.actions.bound == []
    assert world.coordinator.phase_of("ml/w") == "Binding"
    third = await world.bind("w2", nodes["w2"])
    answers = [await first, await second, third]
    assert answers == ["", "", ""]
    assert sorted(world.actions.bound) == sorted(nodes.items())
    assert world.sample("quorum_binds_total", outcome="success") == 3
    assert world.sample("quorum_gang_wait_seconds_count") == 1
    assert world.sample("quorum_gang_bind_seconds_count") == 1  # one gang's bindings, timed once
    assert world.coordinator.reserved_count()[""] == 0


async def test_reserved_members_beyond_quorum_release_their_reservation_at_quorum() -> None:
    world = World()
    names = gang_of(world, 3, min_count=2, gpus=2)
    world.filter("w0")
    reservation = dict(world.coordinator.reservation_of("ml/w"))
    assert len(reservation) == 3  # every pending member is placed
    answers = await asyncio.gather(*(world.bind(n, reservation[f"uid-{n}"]) for n in names[:2]))
    assert answers == ["", ""]
    assert world.coordinator.reserved_count()[""] == 0
    # The third member is now an ordinary extra and binds directly.
    assert world.filter("w2").passing == world.names
    assert await world.bind("w2", "b1-r1-n1") == ""


async def test_bind_is_idempotent_for_a_pod_already_bound_to_that_node() -> None:
    world = World()
    world.add(gang_pod("p", node_name="b0-r0-n0"))
    assert await world.bind("p", "b0-r0-n0") == ""
    assert world.actions.bound == []
    assert "already bound to b0-r0-n0" in await world.bind("p", "b0-r0-n1")


async def test_plain_pod_binds_immediately() -> None:
    world = World()
    world.add(gang_pod("p"))
    assert await world.bind("p", "b0-r0-n0") == ""
    assert world.actions.bound == [("p", "b0-r0-n0")]
    # Until the watch shows the binding, the pod's requests count as used and /debug shows it.
    assert world.coordinator.inflight_snapshot() == {"ml/p": "b0-r0-n0"}
    world.bind_in_cache("p", "b0-r0-n0")
    assert world.coordinator.inflight_snapshot() == {}


async def test_failed_bind_is_reported_to_the_scheduler() -> None:
    world = World()
    world.add(gang_pod("p"))
    world.actions.refuse["p"] = "binding ml/p refused"
    assert "refused" in await world.bind("p", "b0-r0-n0")
    assert world.sample("quorum_binds_total", outcome="error") == 1
    assert world.coordinator.inflight_snapshot() == {}


async def test_unexpected_bind_error_is_reported_and_leaves_no_capacity_counted() -> None:
    world = World()
    world.add(gang_pod("p", gpus=8))
    world.actions.crash.add("p")
    assert await world.bind("p", "b0-r0-n0") == "connection reset by peer"
    assert world.coordinator.inflight_snapshot() == {}
    assert world.coordinator.free_capacity("b0-r0-n0") == world.cache.free_on(world.cache.nodes["b0-r0-n0"])


async def test_bound_members_count_towards_quorum() -> None:
    world = World()
    world.add(gang_pod("w0", gang="w", min_count=2, gpus=1, node_name="b0-r0-n0"))
    world.add(gang_pod("w1", gang="w", min_count=2, gpus=1))
    decision = world.filter("w1")
    assert len(decision.passing) == 1
    assert await world.bind("w1", decision.passing[0]) == ""


# ---------------------------------------------------------------------------------- timeout, backoff


async def test_quorum_timeout_releases_everything_and_backs_off_exponentially() -> None:
    world = World(GangTimings(bind_timeout_seconds=0.05, backoff_base_seconds=0.2, backoff_max_seconds=10))
    gang_of(world, 3, min_count=3, gpus=2)
    world.filter("w0")
    node0 = world.coordinator.reservation_of("ml/w")["uid-w0"]
    answer = await world.bind("w0", node0)
    assert "quorum not reached within 0.05s (1 of 3 members reached bind)" in answer
    assert world.coordinator.reservation_of("ml/w") == {} and world.coordinator.held_binds("ml/w") == []
    assert world.coordinator.reserved_nodes() == []
    assert world.actions.bound == []
    assert world.sample("quorum_reservation_timeouts_total") == 1
    assert world.sample("quorum_gang_backoffs_total") == 1
    # While backing off, members are rejected with the reason and no placement is attempted.
    decision = world.filter("w1")
    assert decision.passing == []
    assert "backing off 0.2s" in decision.unresolvable["b0-r0-n0"]
    assert world.sample("quorum_placements_total", result="fit") == 1
    assert world.coordinator.phase_of("ml/w") == "Backoff"
    # After the backoff the members are nudged and the gang is placed again.
    await asyncio.sleep(0.25)
    assert "w1" in world.actions.requeued
    world.filter("w1")
    assert world.sample("quorum_placements_total", result="fit") == 2
    # A second timeout doubles the backoff.
    await asyncio.sleep(0.1)
    assert world.coordinator.failures_of("ml/w") == 2
    assert "backing off 0.4s" in world.coordinator.reason_of("ml/w")


async def test_backoff_is_capped() -> None:
    now = [1000.0]
    world = World(GangTimings(bind_timeout_seconds=0.01, backoff_base_seconds=1, backoff_max_seconds=1.5),
                  clock=lambda: now[0])
    gang_of(world, 2, min_count=2)
    for expected in ("backing off 1s", "backing off 1.5s", "backing off 1.5s"):
        world.filter("w0")  # reserves; only one member reaches bind, so quorum times out
        await world.bind("w0", world.coordinator.reservation_of("ml/w")["uid-w0"])
        assert expected in world.coordinator.reason_of("ml/w")
        now[0] += 2  # past the backoff
