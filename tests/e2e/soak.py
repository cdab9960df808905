"""Contention soak with faults, bounded in time, on the local cluster (loopback only).

Gangs of mixed shapes arrive until their demand is ``oversubscription`` times the cluster's GPUs,
run for a while (kwok completes them) and make room for the next; now and then a waiting gang is
cancelled. Every ``fault_every`` seconds one fault is injected, in turn: Quorum SIGKILLed and
restarted, its watch connections cut (Quorum talks to the apiserver through a cuttable proxy for
the whole soak), kube-scheduler killed and restarted, kube-apiserver killed and restarted.

Checked throughout, and reported as violations:
- no gang partially bound for more than ``partial_grace`` seconds (``scenario.GangWatcher``);
- no deadlock: no waiting gang that fits the free capacity (outside a claim that is not its own)
  for more than ``deadlock_seconds``;
- after the end and cleanup, no leaked reservation or claim in Quorum.

    python -m tests.e2e.soak --duration 780 --json .cache/e2e/soak.json   (hack/soak.sh)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .cluster import E2E_LABEL, Kube, Quorum, Settings, Topology, wait
from .faults import CuttableProxy, restart_process
from .lifecycle_support import kwok_annotations
from .pairs import PIDS, argv_value
from .process import LocalProcess
from .scenario import GangWatcher, Scenario, gang_of, is_deleting, node_of
from .soak_checks import Deadlocks, summary_of

FAULTS = ("quorum-kill", "watch-cut", "scheduler-kill", "apiserver-restart")


@dataclass
class SoakConfig:
    duration: float = 150.0
    fault_every: float = 25.0
    faults: tuple[str, ...] = FAULTS
    oversubscription: float = 3.0
    partial_grace: float = 5.0
    deadlock_seconds: float = 60.0
    settle_seconds: float = 45.0
    seed: int = 1


@dataclass
class Soak:
    sc: Scenario
    config: SoakConfig
    created: dict[str, float] = field(default_factory=dict)  # gang -> when created
    cancelled: set[str] = field(default_factory=set)
    faults: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.config.seed)
        self.stop = threading.Event()
        self.deadlocks = Deadlocks(self.sc, self.config.deadlock_seconds)

    # ------------------------------------------------------------------ workload
    def demand(self) -> int:
        gpu = self.sc.settings.gpu_resource
        total = 0
        for pod in self.sc.kube.pods(self.sc.ns, label_selector="e2e.quorum.dev/role=soak"):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or is_deleting(pod):
                continue
            total += int(pod["spec"]["containers"][0]["resources"]["requests"].get(gpu, 0))
        return total

    def shape(self) -> tuple[int, int, str | None]:
        """(members, GPUs each, required level): mostly rack-sized or smaller, now and then a block."""
        topo = self.sc.topo
        gpn, rack_nodes = topo.gpus_per_node, topo.nodes_per_rack
        choice = self.rng.random()
        if choice < 0.1:
            return rack_nodes * topo.racks_per_block, gpn, "block"
        if choice < 0.5:
            return self.rng.choice([2, rack_nodes]), gpn, "rack"
        return self.rng.choice([2, 4, 8]), gpn // 2, None

    def create_gang(self) -> None:
        size, gpus, required = self.shape()
        name = f"s{len(self.created)}"
        members = self.sc.gang(name, size, gpus=gpus, required=required, create=False)
        run = f"{self.rng.randint(8, 25)}s"
        for manifest in members:
            manifest["metadata"]["labels"]["e2e.quorum.dev/role"] = "soak"
            manifest["metadata"]["annotations"].update(kwok_annotations(complete_after=run))
        self.created[name] = time.time()
        self.sc.create(members)

    def cancel_one(self) -> None:
        """A user gives up on a gang still waiting: all its pods go."""
        waiting: dict[str, list[str]] = {}
        for pod in self.sc.kube.pods(self.sc.ns, label_selector="e2e.quorum.dev/role=soak"):
            gang = gang_of(pod)
            if gang:
                waiting.setdefault(gang, []).append("" if node_of(pod) else pod["metadata"]["name"])
        candidates = [g for g, names in waiting.items() if all(names)]
        if candidates:
            gang = self.rng.choice(sorted(candidates))
            self.sc.watcher.retire(gang)
            self.cancelled.add(gang)
            self.sc.delete(waiting[gang], wait=False)

    def workload(self) -> None:
        target = self.config.oversubscription * self.sc.topo.total_gpus
        while not self.stop.wait(0.5):
            self.guard("workload", lambda: self.create_gang() if self.demand() < target else None)
            if self.rng.random() < 0.02:
                self.guard("cancel", self.cancel_one)

    # ------------------------------------------------------------------ faults
    def inject(self, kind: str, proxy: CuttableProxy) -> dict[str, Any]:
        started = time.time()
        record: dict[str, Any] = {"fault": kind, "at": round(started - self.started_at, 1)}
        if kind == "quorum-kill":
            record["ready_after_seconds"] = restart_process("quorum", "extender", self.sc.quorum.ready)
        elif kind == "watch-cut":
            record["connections_cut"] = proxy.cut()
        elif kind == "scheduler-kill":
            record["restarted_after_seconds"] = restart_process("kube-scheduler", "kube-scheduler")
        elif kind == "apiserver-restart":
            record["ready_after_seconds"] = restart_process("kube-apiserver", "kube-apiserver",
                                                            self.apiserver_up)
        return record

    def apiserver_up(self) -> bool:
        try:
            self.sc.kube.core.list_namespace(limit=1, _request_timeout=3)
        except Exception:
            return False
        return True

    def fault_loop(self, proxy: CuttableProxy) -> None:
        turn = 0
        while not self.stop.wait(self.config.fault_every):
            kind = self.config.faults[turn % len(self.config.faults)]
            turn += 1
            self.guard(f"fault {kind}", lambda kind=kind: self.faults.append(self.inject(kind, proxy)))

    def guard(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as exc:  # the apiserver may be restarting: count, go on
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:300])

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        self.started_at = time.time()
        with tempfile.TemporaryDirectory(prefix="quorum-soak-") as tmp, through_proxy(Path(tmp)) as proxy:
            threads = [threading.Thread(target=self.workload, daemon=True),
                       threading.Thread(target=self.fault_loop, args=(proxy,), daemon=True),
                       threading.Thread(target=self.deadlocks.loop, args=(self.stop,), daemon=True)]
            for thread in threads:
                thread.start()
            time.sleep(self.config.duration)
            self.stop.set()
            for thread in threads:
                thread.join(timeout=120)
            settled = wait(lambda: not self.sc.watcher.partial_gangs(), timeout=self.config.settle_seconds)
            cuts = {"cuts": proxy.cuts, "connections": proxy.accepted}
        leaks = self.cleanup()
        return summary_of(self, settled, leaks, cuts)

    def cleanup(self) -> list[str]:
        for gang in list(self.created):
            self.sc.watcher.retire(gang)
        names = [p["metadata"]["name"] for p in self.sc.kube.pods(self.sc.ns)]
        self.sc.delete(names, wait=False)  # (a wait of the Scenario's would stop at a violation)
        wait(lambda: not self.sc.kube.pods(self.sc.ns), timeout=120, interval=1.0)

        def clean() -> bool:
            doc = self.sc.quorum.debug()
            return not doc.get("reservedPods") and not doc.get("claim")

        wait(clean, timeout=30, interval=0.5)
        doc = self.sc.quorum.debug()
        leaks = [f"reservedPods={doc.get('reservedPods')}"] if doc.get("reservedPods") else []
        return leaks + ([f"claim={doc['claim']}"] if doc.get("claim") else [])


class through_proxy:
    """Quorum restarted with its kubeconfig pointing at a ``CuttableProxy`` to the apiserver, and
    restarted with its own kubeconfig again afterwards."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __enter__(self) -> CuttableProxy:
        process = LocalProcess.from_pid_file(PIDS / "quorum.pid", must_contain="extender")
        if isinstance(process, str):
            raise RuntimeError(process)
        self.original = process
        source = argv_value(process.argv, "--kubeconfig")
        if not source:
            raise RuntimeError("the local Quorum names no --kubeconfig")
        config_doc = Path(source)
        server = _server_of(config_doc)
        self.proxy = CuttableProxy(server)
        via = self.proxy.kubeconfig_via(config_doc, self.root / "quorum-via-proxy.kubeconfig")
        self._restart_with(source, str(via))
        return self.proxy

    def __exit__(self, *_: object) -> None:
        via = str(self.root / "quorum-via-proxy.kubeconfig")
        source = argv_value(self.original.argv, "--kubeconfig")
        assert source is not None
        self._restart_with(via, source)
        self.proxy.close()

    def _restart_with(self, old: str, new: str) -> None:
        current = LocalProcess.from_pid_file(PIDS / "quorum.pid", must_contain="extender")
        if isinstance(current, str):
            raise RuntimeError(current)
        argv = [new if a == old else a for a in current.argv]
        current.kill()
        dataclasses.replace(current, argv=argv).restart()
        quorum = Quorum(Settings.from_env().quorum_url)
        if not wait(quorum.ready, timeout=60, interval=0.2):
            raise RuntimeError("Quorum not ready after switching its kubeconfig")


def _server_of(kubeconfig: Path) -> tuple[str, int]:
    doc = yaml.safe_load(kubeconfig.read_text())
    server = doc["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    return host, int(port)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=780.0)
    parser.add_argument("--fault-every", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the summary here too")
    args = parser.parse_args()
    settings = Settings.from_env()
    kube, quorum = Kube(settings.kubeconfig), Quorum(settings.quorum_url)
    topo = Topology.discover(kube, settings)
    namespace = f"soak-{secrets.token_hex(2)}"
    kube.create_namespace(namespace, {E2E_LABEL: "true"})
    watcher = GangWatcher(kube.fork(), quorum, namespace)
    results: dict[str, Any] = {}
    sc = Scenario(settings, kube, quorum, topo, namespace, watcher, results.__setitem__)
    watcher.grace = SoakConfig.partial_grace
    watcher.start()
    try:
        config = SoakConfig(duration=args.duration, fault_every=args.fault_every, seed=args.seed)
        summary = Soak(sc, config).run()
    finally:
        watcher.stop()
        kube.core.delete_namespace(namespace)
    text = json.dumps(summary, indent=2, sort_keys=True)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if not summary["violations"] and not summary["leaks"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
