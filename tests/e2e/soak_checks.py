"""The soak's deadlock check and its summary (see soak.py).

A deadlock here is a waiting gang (every member created, none bound) that fits the capacity free
at that moment, for longer than the limit, with no reason Quorum gives for waiting: capacity under
another gang's claim does not count as free, and a gang in backoff is waiting on purpose (bounded).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from .cluster import ANN_MIN_COUNT, ANN_REQUIRED, gpu_usage, pod_gpus
from .scenario import Scenario, gang_of, is_deleting, node_of

if TYPE_CHECKING:
    from .soak import Soak


class Deadlocks:
    def __init__(self, sc: Scenario, limit: float) -> None:
        self.sc = sc
        self.limit = limit
        self.since: dict[str, float] = {}
        self.found: dict[str, str] = {}
        self.checks = 0

    def loop(self, stop: threading.Event) -> None:
        while not stop.wait(5.0):
            try:
                self.check(time.monotonic())
            except Exception:  # the apiserver may be restarting; the next round looks again
                continue

    def waiting(self) -> dict[str, tuple[int, int, str | None]]:
        """gang -> (members, GPUs each, required level) for gangs whose members all wait."""
        members: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in self.sc.kube.pods(self.sc.ns, label_selector="e2e.quorum.dev/role=soak"):
            gang = gang_of(pod)
            if gang and not is_deleting(pod):
                members[gang].append(pod)
        out = {}
        gpu = self.sc.settings.gpu_resource
        for gang, pods in members.items():
            annotations = pods[0]["metadata"].get("annotations") or {}
            size = int(annotations.get(ANN_MIN_COUNT, "0") or 0)
            if len(pods) >= size and not any(node_of(p) for p in pods):
                out[gang] = (size, pod_gpus(pods[0], gpu), annotations.get(ANN_REQUIRED))
        return out

    def check(self, now: float) -> None:
        self.checks += 1
        topo = self.sc.topo
        used = gpu_usage(self.sc.kube.all_pods(), self.sc.settings.gpu_resource, topo.nodes)
        doc = self.sc.quorum.debug()
        claim = doc.get("claim") or {}
        mine = [g for g in doc.get("gangs") or [] if g["gang"].startswith(f"{self.sc.ns}/")]
        views = {g["gang"].split("/", 1)[1]: g for g in mine}
        fitting = set()
        for gang, (size, gpus, required) in self.waiting().items():
            view = views.get(gang) or {}
            if view.get("backoffSeconds", 0) > 0:
                continue  # waiting on purpose, for a bounded time
            own = claim.get("gang") == f"{self.sc.ns}/{gang}"
            blocked = set() if own else set(claim.get("nodes") or [])
            slots: dict[str, int] = defaultdict(int)
            for name, info in topo.nodes.items():
                if name in blocked or gpus <= 0:
                    continue
                domain = {"rack": info.rack, "block": info.block}.get(required or "", "cluster")
                slots[domain] += (info.gpus - used.get(name, 0)) // gpus
            if any(n >= size for n in slots.values()):
                fitting.add(gang)
                since = self.since.setdefault(gang, now)
                if now - since > self.limit and gang not in self.found:
                    self.found[gang] = (f"gang {gang} ({size} x {gpus} GPUs, {required or 'no'} constraint) "
                                        f"fitted free capacity for {now - since:.0f}s; Quorum: "
                                        f"{view.get('phase')}, {view.get('reason')}")
        for gang in list(self.since):
            if gang not in fitting:
                del self.since[gang]


def summary_of(soak: Soak, settled: bool, leaks: list[str], cuts: dict[str, int]) -> dict[str, Any]:
    watcher = soak.sc.watcher
    bound: dict[str, list[float]] = defaultdict(list)
    for uid, at in watcher.bound_at.items():
        name = watcher.names.get(uid, "")
        gang = name.rsplit("-", 1)[0] if name else ""
        bound[gang].append(at)
    waits = []
    for gang, created in soak.created.items():
        sizes = [int(n.rsplit("-", 1)[1]) for n in watcher.names.values() if n.rsplit("-", 1)[0] == gang]
        if bound.get(gang) and len(bound[gang]) >= (max(sizes) + 1 if sizes else 1):
            waits.append(max(bound[gang]) - created)
    by_kind: dict[str, int] = defaultdict(int)
    for fault in soak.faults:
        by_kind[fault["fault"]] += 1
    violations = [v.message.split("\n", 1)[0] for v in watcher.violations]
    violations += list(soak.deadlocks.found.values())
    if not settled:
        violations.append(f"gangs still partial after the settle time: {watcher.partial_gangs()}")
    quantiles = statistics.quantiles(waits, n=10) if len(waits) >= 2 else []
    return {
        "duration_seconds": soak.config.duration,
        "gangs": {"created": len(soak.created), "bound_whole": len(waits), "cancelled": len(soak.cancelled)},
        "wait_seconds": {"p50": round(statistics.median(waits), 1) if waits else None,
                         "p90": round(quantiles[8], 1) if quantiles else None,
                         "max": round(max(waits), 1) if waits else None},
        "faults": dict(by_kind), "fault_log": soak.faults, "watch_proxy": cuts,
        "longest_partial_seconds": round(max(watcher.longest_partial.values(), default=0.0), 2),
        "deadlock_checks": soak.deadlocks.checks,
        "violations": violations, "leaks": leaks,
        "client_errors": len(soak.errors), "client_errors_sample": soak.errors[:5],
    }
