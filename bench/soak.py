"""Contention soak against the local cluster: how many Events does Quorum write per gang?

Gangs of 2-16 members (annotations and PodGroups alike) are submitted until the GPUs they ask for
are ``--oversubscription`` times the cluster's; members complete after 5-30 s (kwok), and finished
gangs are deleted, so capacity keeps changing hands and waiting gangs are rejected again and again.
A fraction of the gangs never becomes Ready and carries a readiness timeout, so requeues,
evictions and deactivations happen too. At the end the script reads Quorum's
``quorum_events_total{result}`` and the Events in the namespace, and prints per minute and per gang:
Events created, repeats folded into an existing Event's series, series writes, drops.

    python bench/soak.py --minutes 3            # against hack/cluster-up.sh's cluster

It only talks to 127.0.0.1 (the local apiserver and Quorum) and stops by itself.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import secrets
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
GPU = "nvidia.com/gpu"
PODGROUPS = ("scheduling.k8s.io", "v1beta1", "podgroups")


def quorum_events(url: str) -> dict[str, float]:
    """quorum_events_total by result, from Quorum's /metrics."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    out: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        if line.startswith("quorum_events_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            out[result] += float(line.rsplit(" ", 1)[1])
    return dict(out)


def gang_pods(namespace: str, gang: str, size: int, gpus: int, podgroup: bool, never_ready: bool,
              ready_timeout: int) -> list[dict[str, Any]]:
    annotations = {"kwok.quorum.dev/complete-after": f"{random.randint(5, 30)}s"}
    if never_ready:
        annotations = {"kwok.quorum.dev/never-ready": "true"}
    spec_extra: dict[str, Any] = {}
    if podgroup:
        spec_extra["schedulingGroup"] = {"podGroupName": gang}
    else:
        annotations.update({"quorum.dev/gang": gang, "quorum.dev/min-count": str(size)})
        if never_ready:
            annotations["quorum.dev/pods-ready-timeout-seconds"] = str(ready_timeout)
    return [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{gang}-{i}", "namespace": namespace, "labels": {"soak.quorum.dev/gang": gang},
                     "annotations": dict(annotations)},
        "spec": {"schedulerName": "quorum", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                               "limits": {GPU: str(gpus)}}}], **spec_extra},
    } for i in range(size)]


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        config.load_kube_config(args.kubeconfig)
        self.core = client.CoreV1Api()
        self.custom = client.CustomObjectsApi()
        self.args = args
        self.ns = f"soak-{secrets.token_hex(3)}"
        self.live: dict[str, int] = {}  # gang -> GPUs asked
        self.submitted = self.finished = 0
        nodes = self.core.list_node().items
        self.cluster_gpus = sum(int((n.status.allocatable or {}).get(GPU, 0)) for n in nodes)

    def submit(self) -> None:
        size = random.choice([2, 4, 4, 8, 8, 16])
        gpus = random.choice([1, 2, 4, 8])
        gang = f"g{self.submitted}"
        podgroup = random.random() < 0.5
        never_ready = random.random() < self.args.never_ready
        if podgroup:
            body = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                    "metadata": {"name": gang, "namespace": self.ns, "annotations": (
                        {"quorum.dev/pods-ready-timeout-seconds": str(self.args.ready_timeout)}
                        if never_ready else {})},
                    "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}
            self.custom.create_namespaced_custom_object(*PODGROUPS[:2], self.ns, PODGROUPS[2], body)
        for pod in gang_pods(self.ns, gang, size, gpus, podgroup, never_ready, self.args.ready_timeout):
            self.core.create_namespaced_pod(self.ns, pod)
        self.live[gang] = size * gpus
        self.submitted += 1

    def reap(self) -> None:
        """Delete gangs whose members all finished (or were evicted and are gone)."""
        pods = self.core.list_namespaced_pod(self.ns).items
        by_gang: dict[str, list[Any]] = collections.defaultdict(list)
        for pod in pods:
            by_gang[(pod.metadata.labels or {}).get("soak.quorum.dev/gang", "")].append(pod)
        for gang in list(self.live):
            members = by_gang.get(gang, [])
            if not members or all(p.status.phase in ("Succeeded", "Failed") for p in members):
                self.core.delete_collection_namespaced_pod(
                    self.ns, label_selector=f"soak.quorum.dev/gang={gang}", grace_period_seconds=0)
                del self.live[gang]
                self.finished += 1

    def run(self) -> dict[str, Any]:
        self.core.create_namespace({"metadata": {"name": self.ns}})
        before = quorum_events(self.args.quorum_url)
        started = time.monotonic()
        deadline = started + self.args.minutes * 60
        try:
            while time.monotonic() < deadline:
                self.reap()
                while sum(self.live.values()) < self.args.oversubscription * self.cluster_gpus:
                    self.submit()
                time.sleep(1.0)
            elapsed = time.monotonic() - started
            after = quorum_events(self.args.quorum_url)
            reasons = collections.Counter(
                e.reason for e in self.core.list_namespaced_event(self.ns).items
                if (e.reporting_component or "") == "quorum.dev/extender")
        finally:
            self.core.delete_namespace(self.ns)
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in sorted(set(after) | set(before))}
        minutes = elapsed / 60
        return {
            "minutes": round(minutes, 2), "cluster_gpus": self.cluster_gpus,
            "oversubscription": self.args.oversubscription, "gangs_submitted": self.submitted,
            "gangs_finished": self.finished, "events_by_result": delta,
            "created_per_minute": round(delta.get("created", 0) / minutes, 1),
            "created_per_gang": round(delta.get("created", 0) / max(self.submitted, 1), 2),
            "folded_per_created": round(delta.get("aggregated", 0) / max(delta.get("created", 1), 1), 2),
            "events_in_namespace_by_reason": dict(reasons.most_common()),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--oversubscription", type=float, default=3.0, help="GPUs asked / GPUs there")
    parser.add_argument("--never-ready", type=float, default=0.1, help="fraction of gangs never Ready")
    parser.add_argument("--ready-timeout", type=int, default=10, help="their readiness timeout (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG")
                        or str(ROOT / ".cache" / "cluster" / "kubeconfig"))
    parser.add_argument("--quorum-url", default=os.environ.get("QUORUM_URL", "http://127.0.0.1:8888"))
    args = parser.parse_args()
    random.seed(args.seed)
    print(json.dumps(Soak(args).run(), indent=2))


if __name__ == "__main__":
    main()
