"""A small simulated cluster for driving the gang core through generated scenarios.

``ClusterModel`` holds the objects as the cluster has them and feeds a ``ClusterCache`` the way the
informers would, with watch events that may lag. It is no apiserver: nothing talks to it over HTTP
or a client; the one ``FakeActions`` applies Quorum's writes to it, and it records, for every
binding, whether the pod's gang had reached its quorum in that batch: a member bound below quorum
is exactly the failure gang scheduling exists to prevent. ``VirtualClockLoop`` runs it all without
sleeping. Nodes, pods and PodGroups are built by ``payloads``, as in the other unit tests.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from extender.cluster.cache import ClusterCache
from extender.cluster.conventions import (
    gang_key_of_pod,
    named_gang_key,
    scheduling_group_key,
    yielding_gang_key,
)
from extender.cluster.jobsets import JOBSETS, jobset_member
from extender.cluster.object_sources import GANG_OBJECT_KINDS
from extender.cluster.records import PodRecord, pod_record
from extender.cluster.resources import Resources, add_into, subtract_into
from extender.gang.core import BindFailed
from extender.topology.model import fits

from .payloads import LEVEL_LABELS, make_composite, make_node, make_pod, make_podgroup, merge_annotations

GPU = "nvidia.com/gpu"
NAMESPACE = "ml"
NODE_NAMES = tuple(f"b{b}-r{r}-n{n}" for b in range(2) for r in range(2) for n in range(2))
Obj = dict[str, Any]
T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    """Where the loop would sleep, its clock jumps ahead instead. Nothing here does I/O, so no
    file descriptor is ever polled (the loop's own wake-up pipe is only for other threads)."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise RuntimeError("the event loop would wait forever")
        self._loop.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """Timeouts and backoffs of thousands of generated steps cost no wall-clock time; an
    exception in any task or callback (even one nobody awaits) is recorded in ``errors``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.errors: list[str] = []
        super().__init__(_JumpingSelector(self))
        self.set_task_factory(self._task)
        self.set_exception_handler(
            lambda _, context: self.errors.append(f"{context['message']}: {context.get('exception')!r}"))

    def time(self) -> float:
        return self.now

    def _task(self, loop: asyncio.AbstractEventLoop,
              coro: Generator[Any, None, T] | Coroutine[Any, Any, T], /, **kwargs: Any) -> asyncio.Task[T]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        task.add_done_callback(self._check)
        return task

    def _check(self, task: asyncio.Task[Any]) -> None:
        error = None if task.cancelled() else task.exception()
        if isinstance(error, Exception) and not isinstance(error, BindFailed):
            self.errors.append(repr(error))

    def run(self, step: Callable[[], Any]) -> Any:
        """Run a step inside the loop (the core arms timers and spawns tasks), then let what it
        woke take its next steps: a quorum released reaches the apiserver before ``run`` returns."""
        async def call() -> Any:
            result = step()
            for _ in range(4):
                await asyncio.sleep(0)
            return result
        return self.run_until_complete(call())

    def advance(self, seconds: float) -> None:
        self.run_until_complete(asyncio.sleep(seconds))
        self.run(lambda: None)

    def cancel_all(self) -> None:
        tasks = asyncio.all_tasks(self)
        for task in tasks:
            task.cancel()
        if tasks:
            self.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def node(name: str, gpus: int) -> Obj:
    """Node ``b<i>-r<j>-n<k>`` in its block and rack, with ``gpus`` GPUs."""
    return make_node(name, name.split("-")[0], "-".join(name.split("-")[:2]), gpus=gpus)


# Annotation gangs whose pods also name a PodGroup (WorkloadWithJob: basic unless it asks for a gang).
JOB_GROUPS = {"a1": "j0"}
# A JobSet whose pods name no gang: it decides (one gang, one per Job, or none) with two Jobs.
JOBSET = "s0"
JOBSET_SOURCE = next(k for k in GANG_OBJECT_KINDS if k.name == JOBSETS).source("jobset.x-k8s.io/v1alpha2")


def jobset(level: str | None, pods_per_job: int) -> Obj:
    """JobSet ``s0``: replicated job ``workers``, two Jobs of ``pods_per_job`` pods."""
    annotations = {} if level is None else {"quorum.dev/jobset-gang": level}
    job = {"parallelism": pods_per_job, "completions": pods_per_job}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": JOBSET, "namespace": NAMESPACE, "uid": "uid-js", "annotations": annotations},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}]},
            "status": {"restarts": 0}}


def pod(name: str, gpus: int, annotations: dict[str, str] | None = None, group: str | None = None,
        priority: int = 0) -> Obj:
    obj = make_pod(name, f"uid-{name}", namespace=NAMESPACE, group=group, cpu="1", memory="1Gi",
                   gpus=gpus, annotations=annotations)
    obj["spec"]["priority"] = priority
    return obj


def podgroup(name: str, min_count: int | None, rack: bool, priority: int = 0,
             parent: str | None = None) -> Obj:
    return make_podgroup(name, min_count or None, namespace=NAMESPACE, topology_key="rack" if rack else None,
                         priority=priority, parent=parent)


# A CompositePodGroup: the PodGroups that name it (``podgroup_changes``) are one gang with it.
COMPOSITE = "c0"
COMPOSITE_KEY = f"{NAMESPACE}/composite:{COMPOSITE}"
COMPOSITE_GROUPS = 2  # its minGroupCount
COMPOSITE_SOURCE = next(k for k in GANG_OBJECT_KINDS if k.name == "compositepodgroups").source(
    "scheduling.k8s.io/v1alpha3")


def composite() -> Obj:
    return make_composite(COMPOSITE, COMPOSITE_GROUPS, namespace=NAMESPACE)


def claiming(obj: Obj, gang: str, min_count: int, group: bool) -> Obj:
    """A copy of the pod whose request names another gang (by annotation or PodGroup)."""
    spec = {k: v for k, v in obj["spec"].items() if k != "schedulingGroup"}
    if group:
        spec["schedulingGroup"] = {"podGroupName": gang}
    annotations = {"quorum.dev/gang": gang, "quorum.dev/min-count": str(min_count)}
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}, "spec": spec}


def bound_node(obj: Obj) -> str:
    """The node a pod holds capacity on ("" when pending or finished)."""
    if obj["status"]["phase"] in ("Succeeded", "Failed"):
        return ""
    return str(obj["spec"].get("nodeName") or "")


@dataclass(slots=True)
class Call:
    """One binding call to the apiserver; ``entered``/``returned`` order the calls (-1: open)."""

    uid: str
    gang: str | None
    need: int
    running: set[str]
    entered: int
    returned: int = -1


class ClusterModel:
    """The cluster's objects, and the one cache that watches them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self.podgroups: dict[str, Obj] = {}
        self.jobsets: dict[str, Obj] = {}
        self.composites: dict[str, Obj] = {}
        self.cache = ClusterCache(LEVEL_LABELS)
        self.watch = "now"  # when new pods and bindings reach the cache: "now", "later" or "manual"
        self.api_delay = 0.0
        self.unseen: set[str] = set()  # created or bound here, not yet delivered to the cache
        # Deleted while their events were held (watch "manual"): the watch tells it all later, in
        # order, or it is down and the cache learns only from a relist that lacks them.
        self.vanished: dict[str, Obj] = {}
        self.refuse: set[str] = set()  # uids whose next binding the apiserver refuses
        self.binding: dict[str, tuple[str | None, str]] = {}  # uid -> (gang, node) of calls under way
        self.calls: list[Call] = []
        self.tick = 0
        self.bound_alone: list[str] = []  # bindings of a gang member below quorum (must stay empty)
        # Gangs a test step itself left partly bound (refused or cut-short bindings, members
        # finished, deleted or bound by someone else, minCount raised over running members).
        self.disturbed: set[str] = set()
        self._requests: dict[str, Resources] = {}
        self._seq = 0
        # Gangs of deleted pods: a binding refused because its pod is gone still belongs to the
        # batch Quorum released (Quorum may not have seen the pod, nor its deletion).
        self.former_gangs: dict[str, str | None] = {}
        self.former_parts: dict[str, str | None] = {}

    # ------------------------------------------------------------------ reading the cluster
    def gang_of(self, uid: str) -> str | None:
        obj = self.pods.get(uid)
        return self.former_gangs.get(uid) if obj is None else self.filed(obj)

    def filed(self, obj: Obj) -> str | None:
        """The pod's gang as the cluster's objects say: a basic PodGroup yields to the gang the
        pod's annotations name (the Job controller's PodGroup of an annotated Job); a JobSet's pod
        that names none is in its JobSet's gang (while the JobSet is unknown: the JobSet's key)."""
        named, group = yielding_gang_key(obj), scheduling_group_key(obj)
        podgroup = self.podgroups.get(group.split("/", 1)[1]) if group is not None else None
        if named is not None and podgroup is not None and "gang" not in podgroup["spec"]["schedulingPolicy"]:
            return named
        if podgroup is not None and podgroup["spec"].get("parentCompositePodGroupName"):
            return f"{NAMESPACE}/composite:{podgroup['spec']['parentCompositePodGroupName']}"
        key = gang_key_of_pod(obj)
        labels = obj["metadata"].get("labels") or {}
        if key is not None or labels.get("jobset.sigs.k8s.io/jobset-name") != JOBSET:
            return key
        level = self._jobset_level()
        if level == "job":
            return f"{NAMESPACE}/{JOBSET}/workers.{labels['jobset.sigs.k8s.io/job-index']}/attempt.0"
        return f"{NAMESPACE}/{JOBSET}/attempt.0"

    def held_for_jobset(self, uid: str) -> bool:
        """A JobSet's pod that names no gang, while its JobSet does not exist: Quorum holds it."""
        obj = self.pods.get(uid)
        if obj is None or gang_key_of_pod(obj) is not None or JOBSET in self.jobsets:
            return False
        return (obj["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-name") == JOBSET

    def _jobset_level(self) -> str | None:
        obj = self.jobsets.get(JOBSET)
        return None if obj is None else obj["metadata"]["annotations"].get("quorum.dev/jobset-gang")

    def _jobset_min_count(self, gang: str) -> int:
        """A JobSet gang's size: both Jobs' pods for the whole JobSet, one Job's for a Job."""
        level = self._jobset_level()
        pods = int(self.jobsets[JOBSET]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"]) \
            if JOBSET in self.jobsets else 0
        if level == "jobset" and gang == f"{NAMESPACE}/{JOBSET}/attempt.0":
            return 2 * pods
        return pods if level == "job" and gang != f"{NAMESPACE}/{JOBSET}/attempt.0" else 0

    def parts(self, gang: str) -> dict[str, int] | None:
        """A composite's PodGroups and their minCounts (None for any other gang)."""
        if gang != COMPOSITE_KEY:
            return None
        return {f"{NAMESPACE}/{name}": _gang_min(obj) for name, obj in self.podgroups.items()
                if obj["spec"].get("parentCompositePodGroupName") == COMPOSITE}

    def part_of(self, uid: str) -> str | None:
        obj = self.pods.get(uid) or self.vanished.get(uid)
        return self.former_parts.get(uid) if obj is None else scheduling_group_key(obj)

    def short(self, gang: str, uids: set[str]) -> bool:
        """Whether these members running make less than the gang's quorum: for a composite, each
        PodGroup's own (while the composite exists: without it nothing may bind at all)."""
        parts = self.parts(gang)
        if parts is None:
            return len(uids) < self.min_count(gang)
        if COMPOSITE not in self.composites:
            return False
        counts: dict[str | None, int] = {}
        for uid in uids:
            counts[self.part_of(uid)] = counts.get(self.part_of(uid), 0) + 1
        return len(parts) < COMPOSITE_GROUPS or any(counts.get(k, 0) < m for k, m in parts.items())

    def held_for_composite(self, uid: str) -> bool:
        """A pod of a PodGroup that names the composite, while the composite does not exist."""
        return self.gang_of(uid) == COMPOSITE_KEY and COMPOSITE not in self.composites

    def min_count(self, gang: str) -> int:
        """The quorum the cluster's objects ask for (0 when the gang is not a valid gang now)."""
        name = gang.split("/", 1)[1]
        parts = self.parts(gang)
        if parts is not None:
            return sum(parts.values()) if COMPOSITE in self.composites else 0
        if name.startswith(f"{JOBSET}/"):
            return self._jobset_min_count(gang)
        if name in self.podgroups:
            policy = self.podgroups[name]["spec"]["schedulingPolicy"]
            return int(policy["gang"]["minCount"]) if "gang" in policy else 0
        counts = [int(o["metadata"]["annotations"].get("quorum.dev/min-count", 0))
                  for o in self.pods.values() if self.filed(o) == gang]
        return counts[0] if counts else 0

    def running(self, gang: str) -> set[str]:
        return {u for u, o in self.pods.items() if self.filed(o) == gang and bound_node(o)}

    def running_as_told(self, gang: str) -> set[str]:
        """The gang's running members, and those deleted while bound whose deletion the held watch
        has not told yet: to Quorum they still run, and no one could know better without reading
        the apiserver (a bind that completes the gang in Quorum's view is not a bind below quorum)."""
        gone = {u for u, o in self.vanished.items() if self.filed(o) == gang and bound_node(o)}
        return self.running(gang) | gone

    def gangs(self) -> set[str]:
        return {k for k in map(self.filed, self.pods.values()) if k} | \
            {f"{NAMESPACE}/{g}" for g in self.podgroups}

    def requests_of(self, obj: Obj) -> Resources:
        uid = obj["metadata"]["uid"]
        if uid not in self._requests:
            self._requests[uid] = pod_record(obj, None).requests
        return self._requests[uid]

    def gpus_held(self, name: str) -> int:
        """GPUs of the pods bound to a node or being bound there."""
        binding = {u for u, (_, n) in self.binding.items() if n == name}
        return sum(self.requests_of(o).get(GPU, 0) for u, o in self.pods.items()
                   if bound_node(o) == name or u in binding)

    def fitting_nodes(self, obj: Obj, assumed: dict[str, str]) -> list[str]:
        """Nodes where the pod fits as kube-scheduler sees them: bound pods and its assumed ones."""
        used: dict[str, Resources] = {}
        for uid, other in self.pods.items():
            where = bound_node(other) or ("" if other["spec"].get("nodeName") else assumed.get(uid, ""))
            if where and uid != obj["metadata"]["uid"]:
                add_into(used.setdefault(where, {}), self.requests_of(other))
        out = []
        for name in sorted(self.nodes):
            free = dict(self.cache.nodes[name].allocatable)
            subtract_into(free, used.get(name, {}))
            if fits(free, 100, self.requests_of(obj)):
                out.append(name)
        return out

    def new_pod(self, gang: str | None, gpus: int, min_count: int, rack: bool,
                groups: tuple[str, ...], priority: int = 0) -> Obj:
        """Members of one annotation gang carry the same declaration, as a Job's template gives them."""
        self._seq += 1
        name = f"{gang or 'p'}-{self._seq}"
        if gang is None or gang in groups:
            return pod(name, gpus, group=gang, priority=priority)
        if gang == JOBSET:  # JobSet's labels, no gang of its own: two Jobs, filled in turn
            obj = pod(name, gpus, priority=priority)
            obj["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": JOBSET,
                                         "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                                         "jobset.sigs.k8s.io/job-index": str(self._seq % 2),
                                         "jobset.sigs.k8s.io/restart-attempt": "0"}
            return obj
        job_group = JOB_GROUPS.get(gang)  # the PodGroup the Job controller writes for an annotated Job
        first = next((o for o in self.pods.values() if named_gang_key(o) == f"{NAMESPACE}/{gang}"), None)
        annotations = {"quorum.dev/gang": gang, "quorum.dev/min-count": str(min_count)}
        if rack:
            annotations["quorum.dev/required-topology"] = "rack"
        return pod(name, gpus, first["metadata"]["annotations"] if first else annotations, group=job_group,
                   priority=priority)

    # ------------------------------------------------------------------ changing it
    def create_pod(self, obj: Obj) -> None:
        """A new pod; its watch event may lag like a binding's."""
        uid = obj["metadata"]["uid"]
        self.pods[uid] = obj
        self.unseen.add(uid)
        if self.watch == "now":
            self.deliver(uid)
        elif self.watch == "later":
            self.loop.call_later(0.005, self.deliver, uid)

    def put_pod(self, obj: Obj) -> None:
        self.pods[obj["metadata"]["uid"]] = obj
        self.unseen.discard(obj["metadata"]["uid"])
        self.cache.upsert_pod(obj)

    def drop_pod(self, uid: str) -> None:
        """A pod is deleted; a watch keeps each object's events in order, so one it has not shown
        yet reaches the cache before its deletion does."""
        obj = self.pods.pop(uid)
        self.former_gangs[uid] = self.filed(obj)
        self.former_parts[uid] = scheduling_group_key(obj)
        if uid in self.unseen:
            self.unseen.discard(uid)
            if self.watch == "manual":
                self.vanished[uid] = obj
                return
            self.cache.upsert_pod(obj)
        self.cache.delete_pod(obj)

    def deliver(self, uid: str) -> None:
        """The watch event of a binding reaches the cache."""
        if uid in self.unseen:
            self.put_pod(self.pods[uid])

    def deliver_all(self) -> None:
        """The watch catches up with every event it held."""
        for uid in sorted(self.unseen):
            self.deliver(uid)
        for obj in self.vanished.values():
            self.cache.upsert_pod(obj)
            self.cache.delete_pod(obj)
        self.vanished.clear()

    def relist(self) -> None:
        """The watch was down too long (410 Gone): the informer lists the pods instead; what
        happened meanwhile to pods created and deleted in between is never told."""
        self.cache.listing_pods()
        self.unseen.clear()
        self.vanished.clear()
        self.cache.replace_pods(list(self.pods.values()))

    def bind(self, uid: str, node_name: str) -> None:
        obj = self.pods[uid]
        obj["spec"]["nodeName"] = node_name
        obj["status"]["phase"] = "Running"
        self.create_pod(obj)

    def refusal(self, uid: str) -> str:
        """Why the apiserver refuses this binding now ("" when it accepts)."""
        if uid in self.refuse:
            self.refuse.discard(uid)
            return "refused by admission"
        if uid not in self.pods:
            return "pod not found"
        return "pod is already bound" if self.pods[uid]["spec"].get("nodeName") else ""

    def batch(self, call: Call) -> set[str]:
        """Members whose binding calls overlap this one: the batch Quorum released together
        (a member the apiserver refused still counts: Quorum could not know)."""
        return {c.uid for c in self.calls
                if c.gang == call.gang and (c.returned < 0 or c.returned > call.entered)}


    # ------------------------------------------------------------------ Quorum's writes (see FakeActions)
    async def bind_call(self, namespace: str, name: str, uid: str, node_name: str,
                        caller_alive: Callable[[], bool]) -> None:
        """One binding call: it waits ``api_delay`` (every batch member enters before any returns),
        then is refused or binds; it is checked against the gang's quorum as Quorum released it."""
        gang = self.gang_of(uid)
        self.tick += 1
        # The gang's quorum and running members as they were when Quorum released the batch.
        call = Call(uid, gang, self.min_count(gang) if gang else 0,
                    self.running_as_told(gang) if gang else set(), self.tick)
        self.calls.append(call)
        if self.held_for_jobset(uid):
            self.bound_alone.append(f"{name} to {node_name}: released while its JobSet does not exist")
        if self.held_for_composite(uid):
            self.bound_alone.append(f"{name} to {node_name}: released while its composite does not exist")
        self.binding[uid] = (gang, node_name)
        try:
            await asyncio.sleep(self.api_delay)
            refusal = self.refusal(uid) if caller_alive() else "Quorum restarted"
            if refusal:
                raise BindFailed(f"binding {namespace}/{name}: {refusal}")
            together = call.running | self.batch(call)
            if len(together) < call.need or (gang == COMPOSITE_KEY and self.short(gang, together)):
                self.bound_alone.append(f"{name} to {node_name}: {len(together)}/{call.need} of {gang}")
            self.bind(uid, node_name)
        except BaseException:
            if gang:
                self.disturbed.add(gang)
            raise
        finally:
            self.binding.pop(uid, None)
            self.tick += 1
            call.returned = self.tick

    def evict(self, uid: str) -> None:
        """The pod goes at once (its owner would recreate it; the scenario creates pods itself)."""
        if uid in self.pods:
            self.drop_pod(uid)

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Bookkeeping on a member, delivered back through the watch (a new resource version)."""
        obj = next((o for o in self.pods.values() if o["metadata"]["name"] == name), None)
        if obj is None:
            return False
        merge_annotations(obj["metadata"].setdefault("annotations", {}), annotations)
        if obj["metadata"]["uid"] not in self.unseen:
            self.cache.upsert_pod(obj)
        return True

    def annotate_gang(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        """Quorum's bookkeeping on the PodGroup (or the JobSet), delivered back through the watch."""
        obj = self.podgroups.get(name) or self.jobsets.get(name)
        if obj is None:
            return False
        merge_annotations(obj["metadata"].setdefault("annotations", {}), annotations)
        if name in self.podgroups:
            self.cache.upsert_podgroup(obj)
        else:
            self.cache.upsert_gang_object(JOBSET_SOURCE, obj)
        return True

    def request_record(self, obj: Obj) -> PodRecord:
        """The pod as a request carries it (the wire's reading)."""
        named = gang_key_of_pod(obj)
        return pod_record(obj, named, yielding_gang_key(obj), jobset_member(obj) if named is None else None)


def _gang_min(podgroup: Obj) -> int:
    policy = podgroup["spec"]["schedulingPolicy"]
    return int(policy["gang"]["minCount"]) if "gang" in policy else 0
