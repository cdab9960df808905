"""Per-test machinery: the all-or-nothing watcher and the ``Scenario`` helper every test drives.

``GangWatcher`` keeps its own watch on the test namespace's pods in a background thread and checks,
several times a second, that no gang stays partially bound (0 < bound < minCount) for longer than a
grace period. Members of one gang are bound concurrently, so the bound count legitimately passes
through intermediate values for a moment; a partial gang that *persists* is what all-or-nothing
scheduling forbids. Gangs the test tears down on purpose are ``retire``d first.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from .cluster import ANN_GANG, ANN_MIN_COUNT, Kube, Quorum, Settings, Topology, pod_manifest

E2E_GANG_LABEL = "e2e.quorum.dev/gang"
E2E_MIN_COUNT = "e2e.quorum.dev/min-count"


def gang_of(pod: Mapping[str, Any]) -> str | None:
    """The gang name a pod declares (PodGroup reference first, as Quorum reads it). Pods of the
    other conventions carry the suite's own label naming their gang (``conventions_support``)."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if group:
        return str(group)
    meta = pod.get("metadata") or {}
    return (meta.get("annotations") or {}).get(ANN_GANG) or (meta.get("labels") or {}).get(E2E_GANG_LABEL)


def node_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


@dataclass
class Violation:
    gang: str
    message: str


@dataclass
class GangWatcher:
    kube: Kube
    quorum: Quorum
    namespace: str
    grace: float = 5.0
    tick: float = 0.1
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> latest object
    bound_at: dict[str, float] = field(default_factory=dict)  # uid -> wall time nodeName was first seen
    names: dict[str, str] = field(default_factory=dict)  # uid -> pod name
    violations: list[Violation] = field(default_factory=list)
    longest_partial: dict[str, float] = field(default_factory=dict)  # gang -> seconds
    watch_errors: list[str] = field(default_factory=list)
    retired: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._partial_since: dict[str, float] = {}
        self._reported: set[str] = set()
        self._min_counts: dict[str, tuple[int | None, float]] = {}
        self._threads: list[threading.Thread] = []
        self.raised = False  # a violation was already reported to the test

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._watch_loop, name=f"watch-{self.namespace}", daemon=True),
            threading.Thread(target=self._check_loop, name=f"check-{self.namespace}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        if not self._synced.wait(15):
            raise RuntimeError(f"pod watch on {self.namespace} did not sync: {self.watch_errors[-3:]}")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=1.0)

    def retire(self, gang: str) -> None:
        """Stop checking a gang the test is about to delete (its count will fall through 0 < n < min)."""
        with self._lock:
            self.retired.add(gang)
            self._partial_since.pop(gang, None)

    # ------------------------------------------------------------------ watch
    def _watch_loop(self) -> None:
        core = self.kube.core
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    doc = Kube.raw(core.list_namespaced_pod, self.namespace)
                    now = time.time()
                    with self._lock:
                        self.pods.clear()
                        for pod in doc["items"]:
                            self._store(pod, now)
                    version = doc["metadata"]["resourceVersion"]
                    self._synced.set()
                response: Any = core.list_namespaced_pod(
                    self.namespace, watch=True, resource_version=version, allow_watch_bookmarks=True,
                    timeout_seconds=5, _preload_content=False, _request_timeout=(5, 30))
                try:
                    for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                        if self._stop.is_set():
                            break
                        if not line:
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                version = None
                                break
                            raise RuntimeError(f"watch error: {obj}")
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if kind == "BOOKMARK":
                            continue
                        with self._lock:
                            if kind == "DELETED":
                                self.pods.pop(obj["metadata"]["uid"], None)
                            else:
                                self._store(obj, time.time())
                finally:
                    response.close()
                    response.release_conn()
            except Exception as exc:  # keep watching; the error is reported with any failure
                self.watch_errors.append(f"{type(exc).__name__}: {exc}"[:300])
                time.sleep(0.5)

    def _store(self, pod: dict[str, Any], now: float) -> None:
        uid = pod["metadata"]["uid"]
        self.pods[uid] = pod
        self.names[uid] = pod["metadata"]["name"]
        if node_of(pod) and uid not in self.bound_at:
            self.bound_at[uid] = now

    def min_count_changed(self, gang: str) -> None:
        """A test changed the PodGroup's minCount: read it again (it is remembered once known)."""
        with self._lock:
            self._min_counts.pop(gang, None)

    # ------------------------------------------------------------------ checks
    def min_count(self, gang: str, pod: Mapping[str, Any]) -> int | None:
        group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if E2E_MIN_COUNT in annotations:  # the suite's note of the size a convention declares
            return int(annotations[E2E_MIN_COUNT])
        if not group:
            raw = annotations.get(ANN_MIN_COUNT, "")
            try:
                return int(raw)
            except ValueError:
                return None
        known, looked_at = self._min_counts.get(gang, (None, 0.0))
        if known is None and time.monotonic() - looked_at > 1.0:
            try:
                obj = self.kube.podgroup(self.namespace, group)
            except Exception:
                obj = None
            gang_policy = (((obj or {}).get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
            # A PodGroup with the basic policy (or none yet) is not checked; looked up again later.
            known = int(gang_policy["minCount"]) if gang_policy else None
            self._min_counts[gang] = (known, time.monotonic())
        return known

    def gang_counts(self) -> dict[str, tuple[list[str], list[str], int | None]]:
        """gang -> (bound pod names, all live pod names, minCount) from the watch's view."""
        with self._lock:
            pods = list(self.pods.values())
        out: dict[str, tuple[list[str], list[str], int | None]] = {}
        for pod in pods:
            gang = gang_of(pod)
            if gang is None or is_deleting(pod):
                continue
            if gang not in out:
                out[gang] = ([], [], self.min_count(gang, pod))
            bound, members, _ = out[gang]
            members.append(pod["metadata"]["name"])
            if node_of(pod):
                bound.append(pod["metadata"]["name"])
        return out

    def _check_loop(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self._check_once()
            except Exception as exc:
                self.watch_errors.append(f"checker: {type(exc).__name__}: {exc}"[:300])

    def _check_once(self) -> None:
        now = time.monotonic()
        for gang, (bound, members, minimum) in self.gang_counts().items():
            with self._lock:
                if gang in self.retired or minimum is None:
                    self._partial_since.pop(gang, None)
                    continue
                if not 0 < len(bound) < minimum:
                    self._partial_since.pop(gang, None)
                    continue
                since = self._partial_since.setdefault(gang, now)
                lasted = now - since
                self.longest_partial[gang] = max(self.longest_partial.get(gang, 0.0), lasted)
                if lasted <= self.grace or gang in self._reported:
                    continue
                self._reported.add(gang)
            unbound = sorted(set(members) - set(bound))
            self.violations.append(Violation(gang, (
                f"gang {gang} stayed partially bound ({len(bound)}/{minimum} bound) for more than "
                f"{self.grace:g}s: bound={sorted(bound)} unbound={unbound}\n"
                f"Quorum /debug/gangs at that moment:\n{self.quorum.debug_text(self.namespace)}")))

    def check(self) -> None:
        if self.violations:
            self.raised = True
            raise AssertionError("all-or-nothing violated:\n" + "\n".join(v.message for v in self.violations))

    def partial_gangs(self) -> dict[str, str]:
        out = {}
        for gang, (bound, _, minimum) in self.gang_counts().items():
            if gang not in self.retired and minimum is not None and 0 < len(bound) < minimum:
                out[gang] = f"{len(bound)}/{minimum}"
        return out


class ScenarioFailure(AssertionError):
    pass


class Scenario:
    """One test's namespace, watcher and helpers. Every wait re-checks the watcher first."""

    def __init__(self, settings: Settings, kube: Kube, quorum: Quorum, topology: Topology, namespace: str,
                 watcher: GangWatcher, record: Callable[[str, Any], None]) -> None:
        self.settings = settings
        self.kube = kube
        self.quorum = quorum
        self.topo = topology
        self.ns = namespace
        self.watcher = watcher
        self.record = record
        self.finished = False

    # ------------------------------------------------------------------ create / delete
    def create(self, manifests: Sequence[Mapping[str, Any]], workers: int = 8) -> list[str]:
        names = [m["metadata"]["name"] for m in manifests]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda m: self.kube.create_pod(self.ns, m), manifests))
        return names

    def pod(self, name: str, **kwargs: Any) -> dict[str, Any]:
        return pod_manifest(self.settings, name, **kwargs)

    def gang(self, name: str, size: int, *, gpus: int, min_count: int | None = None,
             required: str | None = None, preferred: str | None = None, blocked: Iterable[int] = (),
             first: int = 0, create: bool = True) -> list[dict[str, Any]]:
        """Annotation gang members ``name-<i>``; ``blocked`` indexes cannot pass kube-scheduler's own
        filters until ``Kube.admit_blocked`` (see ``pod_manifest``).

        Blocked members come first in the returned list (and are created first): Quorum places a
        gang when a member is filtered while all minCount members exist, and a blocked member is
        never filtered, so it must exist before the last other member is.
        """
        blocked = set(blocked)
        manifests = [self.pod(f"{name}-{i}", gpus=gpus, gang=name,
                              min_count=size if min_count is None else min_count,
                              required=required, preferred=preferred, blocked=i in blocked)
                     for i in sorted(range(first, first + size), key=lambda i: i not in blocked)]
        if blocked and create:
            self.create(manifests[: len(blocked)])
            self.create(manifests[len(blocked):])
            return manifests
        if create:
            self.create(manifests)
        return manifests

    def blockers(self, nodes: Iterable[str], gpus: int, prefix: str = "blocker",
                 priority_class: str | None = None, scheduler_name: str = "") -> list[str]:
        """Plain pods bound directly (spec.nodeName) that take ``gpus`` GPUs on each node; with
        ``scheduler_name``, pods of that scheduler (as if it had bound them)."""
        manifests = [self.pod(f"{prefix}-{i}", gpus=gpus, node_name=node, role="blocker")
                     for i, node in enumerate(nodes)]
        for manifest in manifests:
            if priority_class:
                manifest["spec"]["priorityClassName"] = priority_class
            if scheduler_name:
                manifest["spec"]["schedulerName"] = scheduler_name
        names = self.create(manifests)
        # Both schedulers see a bound pod through their informers; Running proves the watch saw it.
        self.wait_for(f"{len(names)} blockers Running",
                      lambda: all(p.get("status", {}).get("phase") == "Running"
                                  for p in self.pods_named(names).values())
                      and len(self.pods_named(names)) == len(names), timeout=60)
        return names

    def delete(self, names: Iterable[str], wait: bool = True, timeout: float = 60) -> None:
        names = list(names)
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: self.kube.delete_pod(self.ns, n), names))
        if wait:
            self.wait_for(f"{len(names)} pods deleted", lambda: not self.pods_named(names), timeout=timeout)

    # ------------------------------------------------------------------ reads
    def pods(self) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.kube.pods(self.ns)}

    def pods_named(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = set(names)
        return {n: p for n, p in self.pods().items() if n in wanted}

    def gang_pods(self, gang: str) -> dict[str, dict[str, Any]]:
        return {n: p for n, p in self.pods().items() if gang_of(p) == gang}

    def placement(self, names: Iterable[str]) -> dict[str, str]:
        """name -> nodeName ("" when not bound) read from the apiserver."""
        pods = self.pods_named(names)
        return {n: node_of(pods[n]) if n in pods else "" for n in names}

    def gang_debug(self, gang: str) -> dict[str, Any] | None:
        return self.quorum.gangs(self.ns).get(f"{self.ns}/{gang}")

    def scheduling_messages(self, name: str | None = None) -> list[str]:
        """FailedScheduling messages in the namespace (for one pod if named), oldest first."""
        events = [e for e in self.kube.events(self.ns) if e.get("reason") == "FailedScheduling"
                  and (name is None or (e.get("involvedObject") or {}).get("name") == name)]
        events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [str(e.get("message") or e.get("note") or "") for e in events]

    # ------------------------------------------------------------------ waits
    def fail(self, message: str) -> None:
        raise ScenarioFailure(f"{message}\n{self.diag()}")

    def check(self) -> None:
        self.watcher.check()

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float, interval: float = 0.3) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            result = condition()
            if result:
                return result
            if time.monotonic() >= deadline:
                self.fail(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(interval)

    def wait_bound(self, names: Sequence[str], timeout: float = 60, what: str = "") -> dict[str, str]:
        names = list(names)
        self.wait_for(what or f"all {len(names)} pods bound",
                      lambda: all(self.placement(names).values()), timeout)
        return self.placement(names)

    def assert_unbound_for(self, names: Sequence[str], seconds: float, what: str = "") -> None:
        """Observe ``names`` for ``seconds``: none may get a node (fails as soon as one does)."""
        names = list(names)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check()
            bound = {n: node for n, node in self.placement(names).items() if node}
            if bound:
                self.fail(f"{what or 'pods that must stay unbound'} got bound: {bound}")
            time.sleep(0.5)

    def finish(self, settle: float | None = None) -> None:
        """End of scenario: no violation so far, and every gang is at 0 or at least minCount."""
        settle = self.watcher.grace + 2 if settle is None else settle
        deadline = time.monotonic() + settle
        while self.watcher.partial_gangs() and time.monotonic() < deadline:
            self.check()
            time.sleep(0.2)
        self.check()
        partial = self.watcher.partial_gangs()
        if partial:
            self.fail(f"gangs left partially bound at the end of the scenario: {partial}")
        partials = {g: round(s, 2) for g, s in sorted(self.watcher.longest_partial.items()) if s >= 0.05}
        if partials:
            self.record("longest_partial_seconds", partials)
        self.finished = True

    # ------------------------------------------------------------------ diagnostics
    def diag(self) -> str:
        lines = [f"--- pods in {self.ns}:"]
        try:
            pods = self.pods()
        except Exception as exc:
            pods = {}
            lines.append(f"(cannot list pods: {exc})")
        for name, pod in sorted(pods.items()):
            flags = []
            if (pod.get("spec") or {}).get("schedulingGates"):
                flags.append("gated")
            if ((pod.get("spec") or {}).get("nodeSelector") or {}).get("e2e.quorum.dev/admit"):
                flags.append("blocked")
            if is_deleting(pod):
                flags.append("deleting")
            lines.append(f"  {name:<24} gang={gang_of(pod) or '-':<12} node={node_of(pod) or '-':<16} "
                         f"phase={(pod.get('status') or {}).get('phase', '?')} {' '.join(flags)}")
        lines.append(f"--- Quorum /debug/gangs ({self.ns}):")
        lines.append(self.quorum.debug_text(self.ns))
        try:
            messages: dict[str, list[str]] = {}
            for event in self.kube.events(self.ns):
                if event.get("reason") == "FailedScheduling":
                    message = str(event.get("message") or "")[:400]
                    pod = (event.get("involvedObject") or {}).get("name", "")
                    messages.setdefault(message, []).append(pod)
            lines.append("--- FailedScheduling events (message: pods):")
            for message, who in list(messages.items())[-8:]:
                lines.append(f"  [{len(who)} pods, e.g. {who[0]}] {message}")
        except Exception as exc:
            lines.append(f"(cannot list events: {exc})")
        if self.watcher.violations:
            lines.append(f"--- watcher violations: {[v.gang for v in self.watcher.violations]}")
        if self.watcher.watch_errors:
            lines.append(f"--- watcher errors: {self.watcher.watch_errors[-3:]}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ assertions on placements
    def racks_and_blocks(self, placement: Mapping[str, str]) -> tuple[set[str], set[str]]:
        nodes = set(placement.values())
        unknown = sorted(n for n in nodes if n not in self.topo.nodes)
        if unknown:
            self.fail(f"pods bound to nodes outside the GPU topology: {unknown}")
        return {self.topo.rack_of(n) for n in nodes}, {self.topo.block_of(n) for n in nodes}

    def bind_skew(self, names: Iterable[str]) -> dict[str, Any]:
        """First to last binding of ``names``: watcher-observed (sub-second) and PodScheduled (1s)."""
        wanted = set(names)
        names_of = self.watcher.names
        observed = sorted(t for uid, t in self.watcher.bound_at.items() if names_of.get(uid) in wanted)
        conditions = []
        for pod in self.pods_named(wanted).values():
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
                    conditions.append(cond.get("lastTransitionTime"))
        from datetime import datetime

        stamps = sorted(datetime.fromisoformat(c.replace("Z", "+00:00")).timestamp() for c in conditions if c)
        return {
            "pods": len(wanted),
            "watch_first_to_last_seconds": round(observed[-1] - observed[0], 3) if observed else None,
            "watch_observed": len(observed),
            "podscheduled_first_to_last_seconds": (stamps[-1] - stamps[0]) if stamps else None,
        }
