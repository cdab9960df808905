"""Generated scenarios against one gang core: whatever happens, no gang member is bound alone.

One coordinator and its cache are driven through random sequences of cluster changes (nodes,
pods, PodGroups), extender calls as kube-scheduler makes them (filter, then bind on the answered
node), apiserver refusals, lagging watches, timeouts and restarts. After every step the core must
be consistent, a pod reserved by at most one gang, and no member bound while its gang is below
quorum. After the bind, members become Ready or fail and nodes go away; readiness and recovery
timeouts requeue gangs (Quorum evicts them whole) and deactivate them past the requeue limit, and
a restart resumes that bookkeeping from the PodGroups. PodDisruptionBudgets come and go: one that
refuses a member's eviction keeps its whole gang running, and one that changes between Quorum's
dry run and the eviction only delays the member, which goes once the budget is lifted.
QUORUM_STATEFUL_EXAMPLES raises the number of scenarios for a longer run.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
from dataclasses import replace
from functools import partial
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from extender.cluster.cache import ClusterCache
from extender.cluster.gang_sources import spec_from_annotations
from extender.config import Config, GangTimings, Lifecycle, Preemption, Starvation
from extender.gang import evictions
from extender.gang.coordinator import Coordinator
from extender.gang.state import Claim
from extender.metrics import Metrics

from .core_world import (
    COMPOSITE,
    COMPOSITE_KEY,
    COMPOSITE_SOURCE,
    JOB_GROUPS,
    JOBSET,
    JOBSET_SOURCE,
    LEVEL_LABELS,
    NAMESPACE,
    NODE_NAMES,
    ClusterModel,
    Obj,
    VirtualClockLoop,
    bound_node,
    claiming,
    composite,
    jobset,
    node,
    podgroup,
)
from .fake_apiserver import FakeActions

TIMEOUT = 0.05
FULL_COLLECTION_EVERY = 50  # scenarios
_TEARDOWNS = itertools.count(1)
WALL_EPOCH = 1_790_000_000.0  # a wall-clock time for the virtual clock's zero
CONFIG = replace(Config(), gang=GangTimings(bind_timeout_seconds=TIMEOUT, backoff_base_seconds=0.02,
                                            backoff_max_seconds=0.2, max_replans=2),
                 lifecycle=Lifecycle(pods_ready_timeout_seconds=0.1, recovery_timeout_seconds=0.1,
                                     backoff_base_seconds=0.02, backoff_max_seconds=0.2, backoff_jitter=0,
                                     backoff_limit_count=2),
                 starvation=Starvation(claim_after_seconds=0.05), preemption=Preemption(enabled=True))
ANNOTATION_GANGS = ("a0", "a1")
GROUPS = ("g0", "g1")
CLAIMED = (*ANNOTATION_GANGS, *GROUPS, "z9")  # gangs a request may name; "z9" exists nowhere
GANG = st.sampled_from((*ANNOTATION_GANGS, *GROUPS, JOBSET, None))  # None: a plain pod
GPUS = st.sampled_from([1, 2, 2, 4, 8])
PRIORITY = st.sampled_from([0, 0, 100])


class CoreMachine(RuleBasedStateMachine):
    """kube-scheduler, the apiserver and the cluster around one Quorum process (or its successor)."""

    def __init__(self) -> None:
        super().__init__()
        # Cyclic garbage is collected between scenarios only (``teardown``): a collection in the
        # middle of one would close the dropped coroutines of a replaced core (and run their
        # ``finally`` code) at a moment no step decides, so a replayed scenario could differ.
        gc.disable()
        self.loop = VirtualClockLoop()
        self.model = ClusterModel(self.loop)
        # Pod names whose evictions a budget refuses: dry runs and real ones, or real ones only.
        self.budget: set[str] = set()
        self.race: set[str] = set()
        self.lifted_at = 0.0
        # Pods a budget protects from the start (no eviction of their gang under way then): pod
        # name -> (gang, the client, how many evictions it had made by then).
        self.guarded: dict[str, tuple[str, FakeActions, int]] = {}
        self.actions = FakeActions(self.model)
        self.scanned: tuple[FakeActions | None, int] = (None, 0)  # evictions already looked at
        self.coordinator = self._start()
        self.answers: dict[str, str] = {}  # uid -> node its last filter passed (the scheduler assumes it)
        self.binds: dict[str, asyncio.Task[str]] = {}  # kube-scheduler's bind calls
        self.jobset_seen = False  # the JobSet existed once (running pods may predate a change)
        self.bind_node: dict[str, str] = {}

    def _start(self) -> Coordinator:
        """A Quorum process: a fresh cache listed from the cluster, a coordinator on top."""
        cache = self.model.cache = ClusterCache(LEVEL_LABELS)
        self.model.unseen.clear()
        self.model.vanished.clear()
        self.actions = FakeActions(self.model)
        self.actions.refuse_eviction, self.actions.refuse_real_eviction = self.budget, self.race
        coordinator = Coordinator(CONFIG, cache, self.actions, Metrics(), clock=self.loop.time, strict=True)
        # The wall clock (backoff ends written on PodGroups, read back after a restart) is virtual
        # too: a real one made a resumed backoff depend on how busy the machine was, and so the
        # generated steps (Hypothesis reported its data generation as flaky under load).
        coordinator.core.wall = lambda: WALL_EPOCH + self.loop.time()

        def fill() -> None:
            cache.replace_nodes(list(self.model.nodes.values()))
            cache.replace_podgroups(list(self.model.podgroups.values()))
            cache.replace_gang_objects(JOBSET_SOURCE, list(self.model.jobsets.values()))
            cache.replace_pods(list(self.model.pods.values()))
        self.loop.run(fill)
        return coordinator

    def teardown(self) -> None:
        self.loop.cancel_all()
        self.loop.close()
        gc.enable()
        # With collection off during the scenario, everything it allocated is in the youngest
        # generation: collecting the two young ones frees its cycles at a fraction of a full
        # collection's cost (which walks every object of the test run: 40% of a long run's time).
        # A full collection now and then frees what an earlier one moved to the old generation.
        if next(_TEARDOWNS) % FULL_COLLECTION_EVERY == 0:
            gc.collect()
        else:
            gc.collect(1)

    # ------------------------------------------------------------------ views
    def open_binds(self) -> set[str]:
        return {u for u, t in self.binds.items() if not t.done()}

    def pending(self) -> list[str]:
        """Pods kube-scheduler would filter: not bound, not finished, no bind call of theirs open."""
        busy = self.open_binds()
        return sorted(u for u, o in self.model.pods.items() if not o["spec"].get("nodeName")
                      and o["status"]["phase"] == "Pending" and u not in busy)

    def answered(self) -> list[str]:
        return [u for u in self.pending() if u in self.answers]

    def reserved_answered(self) -> list[str]:
        return [u for u in self.answered()
                if u in self.coordinator.reservation_of(self.model.gang_of(u) or "")]

    def candidates(self, obj: Obj) -> list[str]:
        assumed = {u: n for u, n in self.answers.items() if u in self.model.pods}
        assumed.update({u: self.bind_node[u] for u in self.open_binds()})
        return self.model.fitting_nodes(obj, assumed)

    # ------------------------------------------------------------------ the cluster changes
    @initialize(gpus=st.lists(st.sampled_from([8, 8, 4, 0]), min_size=len(NODE_NAMES),
                              max_size=len(NODE_NAMES)))
    def cluster(self, gpus: list[int]) -> None:
        for name, count in zip(NODE_NAMES, gpus, strict=True):
            self.node_changes(name, count)

    @initialize(workload=st.lists(st.tuples(GANG, GPUS, st.integers(1, 4), st.booleans()), max_size=3))
    def jobs(self, workload: list[tuple[str | None, int, int, bool]]) -> None:
        """Gangs (with their quorum of members) and plain pods that exist from the start."""
        for gang, gpus, min_count, rack in workload:
            self.pods_created(gang, gpus, min_count, "quorum", rack)

    @rule(name=st.sampled_from(NODE_NAMES), gpus=st.none() | st.integers(0, 8))
    def node_changes(self, name: str, gpus: int | None) -> None:
        """A node joins, its capacity changes, or (None) it is deleted. It keeps room for the pods
        bound to it: capacity lost under running pods is no scheduler's doing."""
        if gpus is None:
            # Members bound there are lost with it (Quorum removes them): their gangs are cut short.
            self.model.disturbed |= {g for u, o in self.model.pods.items()
                                   if bound_node(o) == name and (g := self.model.gang_of(u))}
            self.model.nodes.pop(name, None)
            self.loop.run(lambda: self.model.cache.delete_node(name))
            return
        obj = self.model.nodes[name] = node(name, max(gpus, self.model.gpus_held(name)))
        self.loop.run(lambda: self.model.cache.upsert_node(obj))

    @rule(gang=GANG, gpus=GPUS, min_count=st.integers(1, 4), rack=st.booleans(),
          count=st.sampled_from(["one", "quorum", "quorum", "more", "fewer"]), priority=PRIORITY,
          single=st.booleans(), in_composite=st.booleans())
    def pods_created(self, gang: str | None, gpus: int, min_count: int, count: str, rack: bool,
                     priority: int = 0, single: bool = False, in_composite: bool = False) -> None:
        """One pod, or a gang's worth around its quorum with its PodGroup, as a Job creates them
        (``in_composite``: a PodGroup under the CompositePodGroup, which may come later)."""
        if gang in GROUPS and gang not in self.model.podgroups and count != "one":
            self.podgroup_changes(gang, min_count, rack, priority, single, in_composite)
        if gang == JOBSET and JOBSET not in self.model.jobsets and count != "one" and not rack:
            # (with ``rack``, the pods come first, as when Quorum's watch delivers them before it)
            self.jobset_changes("job" if single else "jobset", max(1, min_count // 2))
        extra = {"one": 1 - min_count, "quorum": 0, "more": 1, "fewer": -1}[count]
        for _ in range(max(1, min_count + extra)):
            obj = self.model.new_pod(gang, gpus, min_count, rack, GROUPS, priority)
            self.loop.run(partial(self.model.create_pod, obj))

    def _pod_goes(self, uid: str, finish: bool) -> None:
        obj = self.model.pods[uid]
        gang = self.model.gang_of(uid)
        if gang and bound_node(obj):
            self.model.disturbed.add(gang)
        if finish and bound_node(obj):
            obj["status"]["phase"] = "Succeeded"
            self.loop.run(lambda: self.model.put_pod(obj))
        else:
            self.loop.run(lambda: self.model.drop_pod(uid))

    @precondition(lambda self: self.model.pods)
    @rule(data=st.data(), finish=st.booleans())
    def pod_goes(self, data: st.DataObject, finish: bool) -> None:
        """A pod is deleted, or (if bound) runs to completion."""
        self._pod_goes(data.draw(st.sampled_from(sorted(self.model.pods))), finish)

    def _running(self) -> list[str]:
        return sorted(u for u, o in self.model.pods.items()
                      if bound_node(o) and o["status"]["phase"] == "Running")

    @precondition(lambda self: self._running())
    @rule(data=st.data(), outcome=st.sampled_from(["ready", "ready", "unready", "failed"]))
    def member_health(self, data: st.DataObject, outcome: str) -> None:
        """A running pod turns Ready, loses readiness, or fails (a failure disturbs its gang)."""
        uid = data.draw(st.sampled_from(self._running()))
        obj = self.model.pods[uid]
        if outcome == "failed":
            gang = self.model.gang_of(uid)
            if gang:
                self.model.disturbed.add(gang)
            obj["status"]["phase"] = "Failed"
        obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if outcome == "ready" else "False"}]
        self.loop.run(lambda: self.model.put_pod(obj))

    @precondition(lambda self: self.pending())
    @rule(data=st.data())
    def bound_elsewhere(self, data: st.DataObject) -> None:
        """Another scheduler (or a user setting nodeName) binds a pod where it fits."""
        uid = data.draw(st.sampled_from(self.pending()))
        obj = self.model.pods[uid]
        nodes = self.candidates(obj)
        if nodes:
            gang = self.model.gang_of(uid)
            if gang:
                self.model.disturbed.add(gang)
            obj["spec"]["nodeName"] = data.draw(st.sampled_from(nodes))
            obj["status"]["phase"] = "Running"
            self.loop.run(lambda: self.model.put_pod(obj))

    @rule(group=st.sampled_from((*GROUPS, *JOB_GROUPS.values())),
          min_count=st.sampled_from(["gone", None, 1, 2, 3, 4]),
          rack=st.booleans(), priority=PRIORITY, single=st.booleans(), in_composite=st.booleans())
    def podgroup_changes(self, group: str, min_count: int | str | None, rack: bool,
                         priority: int = 0, single: bool = False, in_composite: bool = False) -> None:
        """A PodGroup is created or changed (None: the basic policy, not a gang), or deleted;
        ``single``: its disruptionMode lets preemption take its members one by one. A Job's
        PodGroup (``JOB_GROUPS``) turning basic or not moves its annotated pods between gangs.
        ``in_composite``: created under the CompositePodGroup (a parent is never changed after)."""
        before = self._running_gangs()
        key = f"{NAMESPACE}/{group}"
        if min_count == "gone":
            obj = self.model.podgroups.pop(group, podgroup(group, None, False))
            self.loop.run(lambda: self.model.cache.delete_podgroup(obj))
            running = self.model.running(key) | {u for u, (g, _) in self.model.binding.items() if g == key}
            if 0 < len(running) < self.model.min_count(key):
                # Members that name the PodGroup and declare a larger quorum of their own (a Job's
                # annotations) now count toward that one: minCount raised over running members.
                self.model.disturbed.add(key)
            self._disturb_composite()  # a part gone leaves the composite's running members short
            self._disturb_moved(before)
            return
        existing = self.model.podgroups.get(group)
        parent = existing["spec"].get("parentCompositePodGroupName") if existing is not None else \
            (COMPOSITE if in_composite and group in GROUPS else None)
        obj = podgroup(group, min_count if isinstance(min_count, int) else None, rack, priority, parent)
        if single:
            obj["spec"]["disruptionMode"] = {"single": {}}
        self.model.podgroups[group] = obj
        running = self.model.running(key) | {u for u, (g, _) in self.model.binding.items() if g == key}
        if isinstance(min_count, int) and 0 < len(running) < min_count:
            self.model.disturbed.add(key)  # minCount raised over members already running
        self._disturb_composite()
        self.loop.run(lambda: self.model.cache.upsert_podgroup(obj))
        self._disturb_moved(before)

    @rule(present=st.booleans())
    def composite_changes(self, present: bool) -> None:
        """The CompositePodGroup comes or goes; the PodGroups that name it stay."""
        before = self._running_gangs()
        if present:
            obj = self.model.composites[COMPOSITE] = composite()
            self._disturb_composite()
            self.loop.run(lambda: self.model.cache.upsert_gang_object(COMPOSITE_SOURCE, obj))
        else:
            gone = self.model.composites.pop(COMPOSITE, composite())
            self.loop.run(lambda: self.model.cache.delete_gang_object(COMPOSITE_SOURCE, gone))
        self._disturb_moved(before)

    def _disturb_composite(self) -> None:
        """A change that leaves the composite's running members short of what its PodGroups now ask
        (a PodGroup added to it, or its minCount raised) disturbs it, as a raised minCount does."""
        running = self.model.running(COMPOSITE_KEY) | {u for u, (g, _) in self.model.binding.items()
                                                        if g == COMPOSITE_KEY}
        if running and self.model.short(COMPOSITE_KEY, running):
            self.model.disturbed.add(COMPOSITE_KEY)

    @rule(level=st.sampled_from(["gone", None, "jobset", "job"]), pods_per_job=st.integers(1, 2))
    def jobset_changes(self, level: str | None, pods_per_job: int) -> None:
        """The JobSet comes, changes what it asks for (one gang, one per Job, none) or its size, or
        goes: its pods move between gangs, whether the watch delivered them before it or after."""
        before = self._running_gangs()
        if level == "gone":
            obj = self.model.jobsets.pop(JOBSET, jobset(None, 1))
            self.loop.run(lambda: self.model.cache.delete_gang_object(JOBSET_SOURCE, obj))
        else:
            existed = JOBSET in self.model.jobsets or self.jobset_seen
            self.jobset_seen = True
            obj = self.model.jobsets[JOBSET] = jobset(level, pods_per_job)
            for gang in {g for g in before.values() if g and g.startswith(f"{NAMESPACE}/{JOBSET}/")}:
                # The size raised over members already running. Not when the JobSet first arrives:
                # until then Quorum must hold its pods, so none may be running short of it.
                if existed and 0 < len(self.model.running(gang)) < self.model.min_count(gang):
                    self.model.disturbed.add(gang)
            self.loop.run(lambda: self.model.cache.upsert_gang_object(JOBSET_SOURCE, obj))
        self._disturb_moved(before)

    def _running_gangs(self) -> dict[str, str | None]:
        """uid -> gang of every pod running or being bound."""
        return {u: self.model.gang_of(u) for u in self.model.pods
                if bound_node(self.model.pods[u]) or u in self.model.binding}

    def _disturb_moved(self, before: dict[str, str | None]) -> None:
        """Running pods a PodGroup change moved to another gang leave both gangs as they are."""
        for uid, gang in before.items():
            now = self.model.gang_of(uid)
            if now != gang:
                self.model.disturbed.update(g for g in (gang, now) if g)

    # ------------------------------------------------------------------ extender calls
    def _filter(self, obj: Obj, data: st.DataObject, subset: bool = True) -> None:
        uid = obj["metadata"]["uid"]
        candidates = self.candidates(self.model.pods[uid])
        if subset and candidates and data.draw(st.booleans(), label="subset"):
            candidates = data.draw(st.lists(st.sampled_from(candidates), unique=True), label="candidates")
        record = self.model.request_record(obj)
        declared = spec_from_annotations(obj)
        claim = self.coordinator.queue.claim
        decision = self.loop.run(lambda: self.coordinator.filter(record, declared, candidates))
        assert set(decision.passing) <= set(candidates)
        if claim is not None and claim is self.coordinator.queue.claim and self._ranks_below(obj, claim):
            assert not set(decision.passing) & claim.nodes, \
                f"{obj['metadata']['name']} was offered capacity earmarked for {claim.gang}"
        reserved = self.coordinator.reservation_of(self.model.gang_of(uid) or "").get(uid)
        if reserved is not None:
            assert decision.passing == [reserved], "a reserved member is answered its reserved node"
        self.answers.pop(uid, None)
        if decision.passing:
            self.answers[uid] = data.draw(st.sampled_from(decision.passing), label="chosen")

    def _ranks_below(self, obj: Obj, claim: Claim) -> bool:
        """The pod must keep off the claim: not its gang's, not above it, not a gang that ran, not
        a member reserved before the claim was made."""
        uid = obj["metadata"]["uid"]
        gang = self.coordinator.cache.pods[uid].gang_key if uid in self.coordinator.cache.pods \
            else self.model.filed(obj)
        if gang == claim.gang or gang in claim.grandfathered:
            return False
        queue = self.coordinator.queue
        spec = self.coordinator.cache.gang_spec(gang) if gang else None
        if gang is None or spec is None or not spec.is_gang:
            return int(obj["spec"].get("priority", 0)) <= claim.priority
        state = self.coordinator.registry.gangs.get(gang)
        if state is not None and state.started:
            return False
        if self.coordinator.registry.running_count(gang) >= spec.min_count:
            # Quorum runs (bound elsewhere, or binds in flight): an extra member schedules as a
            # plain pod of its own priority (the running gate), the gang's no longer matters.
            return int(obj["spec"].get("priority", 0)) <= claim.priority
        return queue.priority_of(gang) <= claim.priority

    @precondition(lambda self: self.pending())
    @rule(data=st.data(), claimed=st.sampled_from((None, None, None, *CLAIMED)), min_count=st.integers(1, 2))
    def filter_pod(self, data: st.DataObject, claimed: str | None, min_count: int) -> None:
        """One filter call (perhaps for a pod the watch has not delivered yet); the request may name
        another gang than the cache has for the uid (the cache must win, and the pod must never be
        reserved by two gangs)."""
        obj = self.model.pods[data.draw(st.sampled_from(self.pending()))]
        if claimed is not None and obj["metadata"]["uid"] not in self.model.unseen:
            obj = claiming(obj, claimed, min_count, group=claimed in GROUPS)
        self._filter(obj, data)

    @precondition(lambda self: self.pending())
    @rule(data=st.data())
    def scheduling_round(self, data: st.DataObject) -> None:
        """kube-scheduler works through its queue: filter each pending pod, mostly bind it at once."""
        for uid in self.pending():
            if uid in self.model.pods and uid not in self.open_binds():
                self._filter(self.model.pods[uid], data, subset=False)
                if uid in self.answers and data.draw(st.sampled_from([True, True, False]), label="bind"):
                    self._bind(uid, self.answers.pop(uid))

    @precondition(lambda self: self.pending() and self._running())
    @rule(data=st.data())
    def scheduler_preempts(self, data: st.DataObject) -> None:
        """kube-scheduler found no node for a pod and proposes victims (/preempt); it evicts what
        the answer keeps. Whatever it proposes, no gang may be left partly running by it."""
        uid = data.draw(st.sampled_from(self.pending()))
        chosen = data.draw(st.lists(st.sampled_from(self._running()), unique=True, min_size=1, max_size=4))
        proposed: dict[str, dict[str, Any]] = {}
        for victim in chosen:
            where = bound_node(self.model.pods[victim])
            entry = proposed.setdefault(where, {"Pods": [], "NumPDBViolations": 0})
            entry["Pods"].append({"UID": victim})
        obj = self.model.pods[uid]
        record = self.model.request_record(obj)
        kept = self.loop.run(lambda: self.coordinator.preempt(record, proposed))
        for node_name, entry in kept.items():
            assert node_name in proposed
            assert all(victim in proposed[node_name]["Pods"] for victim in entry["Pods"])
        if kept:  # it picks one of the nodes offered and evicts that node's victims
            chosen_node = data.draw(st.sampled_from(sorted(kept)), label="node")
            for victim in kept[chosen_node]["Pods"]:
                if victim["UID"] in self.model.pods:
                    gang = self.model.gang_of(victim["UID"])
                    if gang and self._single(gang):
                        self.model.disturbed.add(gang)  # its owner lets it lose members one by one
                    self.loop.run(partial(self.model.drop_pod, victim["UID"]))

    def _bind(self, uid: str, node_name: str) -> asyncio.Task[str]:
        name, coordinator = self.model.pods[uid]["metadata"]["name"], self.coordinator
        task = self.loop.create_task(coordinator.bind(NAMESPACE, name, uid, node_name))
        self.binds[uid], self.bind_node[uid] = task, node_name
        self.loop.run(lambda: None)
        return task

    @precondition(lambda self: self.answered())
    @rule(data=st.data())
    def bind_answered(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(self.answered()))
        self._bind(uid, self.answers.pop(uid))

    @precondition(lambda self: self.reserved_answered())
    @rule(data=st.data())
    def bind_on_wrong_node(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(self.reserved_answered()))
        reserved = self.coordinator.reservation_of(self.model.gang_of(uid) or "")[uid]
        task = self._bind(uid, data.draw(st.sampled_from([n for n in NODE_NAMES if n != reserved])))
        assert task.done() and task.result() != "", "a bind on another node than reserved is refused"

    @precondition(lambda self: self.pending())
    @rule(data=st.data())
    def refuse_next_binding(self, data: st.DataObject) -> None:
        """The apiserver will refuse this pod's next binding (admission, a conflict)."""
        self.model.refuse.add(data.draw(st.sampled_from(self.pending())))

    @precondition(lambda self: self.reserved_answered())
    @rule(data=st.data(), how=st.sampled_from(["member", "node", "timeout", "podgroup"]))
    def release_then_bind(self, data: st.DataObject, how: str) -> None:
        """The reservation goes between filter and bind: the member must not be bound below quorum."""
        uid = data.draw(st.sampled_from(self.reserved_answered()))
        gang = self.model.gang_of(uid) or ""
        group = gang.split("/")[1]
        reservation = self.coordinator.reservation_of(gang)
        others = sorted(u for u in reservation if u != uid and u in self.model.pods)
        if how == "member" and others:
            self._pod_goes(data.draw(st.sampled_from(others)), finish=False)
        elif how == "node":
            self.node_changes(data.draw(st.sampled_from(sorted(set(reservation.values())))), None)
        elif how == "podgroup" and group in self.model.podgroups:
            self.podgroup_changes(group, "gone", False)
        else:
            self.loop.advance(TIMEOUT * 1.5)
        released = uid not in self.coordinator.reservation_of(gang)
        need = self.model.min_count(gang)
        short = self.model.short(gang, self.model.running(gang)) or (
            need == 0 and group in GROUPS and group not in self.model.podgroups)
        task = self._bind(uid, self.answers.pop(uid))
        if released and short:
            assert task.done() and task.result() != "", "a released member below quorum is refused"
            assert not self.model.pods[uid]["spec"].get("nodeName")

    @precondition(lambda self: self.open_binds())
    @rule(data=st.data())
    def scheduler_gives_up(self, data: st.DataObject) -> None:
        """kube-scheduler's HTTP call times out: the held bind is abandoned."""
        self.binds[data.draw(st.sampled_from(sorted(self.open_binds())))].cancel()
        self.loop.run(lambda: None)

    @precondition(lambda self: self._running() or self.budget or self.race)
    @rule(data=st.data(), kind=st.sampled_from(["budget", "budget", "race", "lift"]))
    def eviction_refusal(self, data: st.DataObject, kind: str) -> None:
        """A PodDisruptionBudget comes to protect a running pod (its dry runs and evictions are
        refused), or one refuses only its real evictions (it changed after Quorum's dry run); or
        every budget is lifted, and time passes for Quorum's next attempts. (Time may pass under
        the budget too: a readiness or recovery timeout then wants the gang evicted.)"""
        if kind == "lift" or not self._running():
            self.budget.clear()
            self.race.clear()
            self.guarded.clear()
            self.lifted_at = self.loop.now
            self.loop.advance(evictions.REFUSAL_RETRY_MAX_SECONDS * 1.5)
            return
        members = [u for u in self._running() if self.model.gang_of(u)]  # where all-or-none matters
        uid = data.draw(st.sampled_from(members or self._running()))
        gang = self.model.gang_of(uid)
        state = self.coordinator.registry.gangs.get(gang or "")
        under_way = state is not None and (uid in state.evicting or self.coordinator.lifecycle.checking(
            state.key))
        name = self.model.pods[uid]["metadata"]["name"]
        seen = self.coordinator.cache.pods.get(uid)
        unseen = seen is None or not seen.node_name or seen.deleting  # the watch has not shown it running
        if gang and (kind == "race" or under_way or unseen):
            # Between a dry run and the evictions, or on a member whose bind the watch has not shown
            # yet (Quorum cannot ask about a member it does not know runs): the gang may run in part
            # until the budget is lifted.
            self.model.disturbed.add(gang)
        elif gang:
            self.guarded.setdefault(name, (gang, self.actions, len(self.actions.evictions)))
        (self.race if kind == "race" else self.budget).add(name)
        self.loop.advance(data.draw(st.sampled_from([0.0, 0.15, 30.0]), label="wait"))  # a timeout may fire

    # ------------------------------------------------------------------ time, watches, restarts
    @rule(seconds=st.sampled_from([0.001, 0.01, 0.03, 0.06, 0.3]))
    def time_passes(self, seconds: float) -> None:
        self.loop.advance(seconds)

    @rule(watch=st.sampled_from(["now", "later", "manual"]), delay=st.sampled_from([0.0, 0.0, 0.02]),
          catch_up=st.sampled_from(["no", "no", "events", "relist"]))
    def apiserver_behaves(self, watch: str, delay: float, catch_up: str) -> None:
        """When bindings reach the cache, how long a binding call takes; maybe the watch catches up
        (with every event it held, or, having been down too long, by a relist)."""
        self.model.watch, self.model.api_delay = watch, delay
        if catch_up == "events":
            self.loop.run(self.model.deliver_all)
        elif catch_up == "relist":
            self.loop.run(self.model.relist)

    @precondition(lambda self: self.coordinator.reserved_nodes() or self.open_binds() or self.model.binding)
    @rule()
    def restart(self) -> None:
        """Quorum restarts with gangs under way: its calls die; a new process lists the cluster.
        (The old process's timers still fire, into a core nothing reads any more.)"""
        self.actions.alive = False
        self.loop.cancel_all()
        self.coordinator = self._start()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def core_is_consistent(self) -> None:
        assert self.loop.errors == [], self.loop.errors
        problems = self.coordinator.check_invariants()
        assert problems == [], problems

    @invariant()
    def binds_in_flight_are_of_pods_that_exist(self) -> None:
        """A bind Quorum counts before the watch shows it is of a pod that exists, one whose
        deletion the cache has not been told of yet, or one whose binding call is still under way."""
        model = self.model
        leaked = [uid for uid in self.coordinator.core.ledger.inflight()
                  if uid not in model.pods and uid not in model.vanished and uid not in model.binding]
        assert leaked == [], f"binds in flight of pods long gone: {leaked}"

    @invariant()
    def one_gang_per_pod(self) -> None:
        owner: dict[str, str] = {}
        for gang in sorted(set(self.coordinator.gangs()) | {f"{NAMESPACE}/{g}" for g in CLAIMED}):
            reservation = self.coordinator.reservation_of(gang)
            assert set(self.coordinator.held_binds(gang)) <= set(reservation)
            for uid in reservation:
                assert uid not in owner, f"{uid} reserved by {owner.get(uid)} and {gang}"
                owner[uid] = gang

    @invariant()
    def requeued_gangs_run_nothing(self) -> None:
        """A gang Quorum evicted is evicted whole: none of its members is left running."""
        for gang in self.coordinator.gangs():
            if self.coordinator.phase_of(gang) == "Deactivated" and gang not in self.model.disturbed:
                assert not self.model.running(gang), f"{gang}: deactivated but running"

    @invariant()
    def refused_evictions_finish_once_lifted(self) -> None:
        """With no budget refusing, no pod whose eviction was refused is still running after
        Quorum's next attempt: nothing is given up and left running forgotten."""
        if self.budget or self.race:
            return
        refused = set(self.actions.refused)
        left = [name for uid, name in self._names().items() if name in refused and uid in self._running()]
        assert not left or self.loop.now - self.lifted_at < evictions.REFUSAL_RETRY_MAX_SECONDS, left

    @invariant()
    def budgets_keep_gangs_whole(self) -> None:
        """While a budget protects a running member, Quorum evicts no other member of its gang
        (but those stranded on a deleted node: they are lost with it, and go without asking, and
        a ``Single`` gang's members preempted one by one, each asking its own budget)."""
        names = self._names()
        running = {name for uid, name in names.items() if uid in self._running()}
        for name, (gang, actions, since) in sorted(self.guarded.items()):
            state = self.coordinator.registry.gangs.get(gang)
            if state is not None and any(names.get(u) == name for u in state.evicting):
                continue  # Quorum already evicts it (a race with the budget): tried until it is gone
            if self.model.min_count(gang) == 0:
                # Not a gang now (its PodGroup is basic or gone): its pods stand alone, and what was
                # evicted meanwhile is no eviction of a gang's member.
                self.guarded[name] = (gang, actions, len(actions.evictions))
                continue
            if actions is self.actions and name in running:
                evicted = [n for _, n, u, why in actions.evictions[since:]
                           if self.model.gang_of(u) == gang and not why.endswith("was deleted")
                           and not (why.startswith("preempted by") and self._single(gang))]
                assert not evicted, f"{gang}: {evicted} evicted while a budget protects {name}"

    def _note_single_preemptions(self) -> None:
        """A preemption that took a member of a ``Single`` gang left it below quorum on purpose:
        the gang is disturbed (its owner allowed it), not broken by Quorum."""
        actions, seen = self.scanned
        evictions = self.actions.evictions
        for _, _, uid, why in evictions[seen if actions is self.actions else 0:]:
            gang = self.model.gang_of(uid)
            if gang and why.startswith("preempted by") and self._single(gang):
                self.model.disturbed.add(gang)
        self.scanned = (self.actions, len(evictions))

    def _single(self, gang: str) -> bool:
        """Whether the gang's PodGroup lets preemption take its members one by one."""
        group = self.model.podgroups.get(gang.split("/", 1)[1])
        return group is not None and group["spec"].get("disruptionMode") == {"single": {}}

    def _names(self) -> dict[str, str]:
        return {uid: obj["metadata"]["name"] for uid, obj in self.model.pods.items()}

    @invariant()
    def no_member_bound_below_quorum(self) -> None:
        assert self.model.bound_alone == []

    @invariant()
    def settled_gangs_are_whole(self) -> None:
        """Once no binding is under way, a gang runs with none or at least minCount members.

        Gangs in ``ClusterModel.disturbed`` are exempt: the scenario itself cut them short (a refused
        or interrupted binding, a bound member finished, deleted or bound by someone else, minCount
        raised over running members). The exemption ends when none of their members runs.
        """
        self._note_single_preemptions()
        if self.open_binds() or self.model.binding:
            return
        for gang in sorted(self.model.gangs()):
            running = self.model.running(gang)
            if not running:
                self.model.disturbed.discard(gang)
            elif gang not in self.model.disturbed:
                assert not self.model.short(gang, running), f"{gang}: {len(running)} running"


CoreMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("QUORUM_STATEFUL_EXAMPLES", "100")),
    stateful_step_count=40,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],  # no "explain"
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCoreStateful = CoreMachine.TestCase
