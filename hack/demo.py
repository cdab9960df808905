"""Run the example workloads against a cluster whose scheduler calls Quorum and show where they landed.

Steps: create the gangs, plain pods and Job from examples/workloads.py; show a gang that does not
fit waiting with Quorum's reason; free capacity by finishing one gang; show the waiting gang bind;
print a table of gang -> state -> nodes -> racks/blocks and Quorum's key metrics.

Usage: python hack/demo.py [--namespace demo] [--quorum-url http://127.0.0.1:8888]
(KUBECONFIG selects the cluster.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from kubernetes import client, config
from kubernetes.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import workloads

BLOCK, RACK = "topology.quorum.dev/block", "topology.quorum.dev/rack"


def create(api: client.ApiClient, namespace: str, obj: dict[str, Any]) -> None:
    kind = obj["kind"]
    try:
        if kind == "Pod":
            client.CoreV1Api(api).create_namespaced_pod(namespace, obj)
        elif kind == "Job":
            client.BatchV1Api(api).create_namespaced_job(namespace, obj)
        elif kind == "PodGroup":
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "scheduling.k8s.io", "v1beta1", namespace, "podgroups", obj
            )
        else:
            raise SystemExit(f"demo: unsupported kind {kind}")
    except ApiException as exc:
        if exc.status != 409:
            raise


def pods_by_group(core: client.CoreV1Api, namespace: str) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for pod in core.list_namespaced_pod(namespace).items:
        annotations = pod.metadata.annotations or {}
        sg = getattr(pod.spec, "scheduling_group", None)
        name = annotations.get("quorum.dev/gang") or (sg.pod_group_name if sg else None)
        groups[name or pod.metadata.name.rsplit("-", 1)[0]].append(pod)
    return groups


def wait_bound(core: client.CoreV1Api, namespace: str, group: str, count: int, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        pods = pods_by_group(core, namespace).get(group, [])
        if sum(1 for p in pods if p.spec.node_name) >= count:
            return time.monotonic() - start
        time.sleep(0.5)
    raise SystemExit(f"demo: {group} did not bind {count} pods within {timeout:.0f}s")


def quorum_get(url: str, path: str) -> bytes:
    with urllib.request.urlopen(url + path, timeout=5) as resp:
        body: bytes = resp.read()
        return body


def table(core: client.CoreV1Api, namespace: str, quorum_url: str) -> str:
    nodes = {
        n.metadata.name: n.metadata.labels or {} for n in client.CoreV1Api(core.api_client).list_node().items
    }
    debug = {
        g["gang"].split("/", 1)[1]: g
        for g in orjson.loads(quorum_get(quorum_url, "/debug/gangs"))["gangs"]
        if g["gang"].startswith(namespace + "/")
    }
    rows = [("WORKLOAD", "STATE", "BOUND", "NODES", "RACKS", "BLOCKS")]
    for group, pods in sorted(pods_by_group(core, namespace).items()):
        bound = [p.spec.node_name for p in pods if p.spec.node_name]
        racks = sorted({nodes.get(n, {}).get(RACK, "?") for n in bound})
        blocks = sorted({nodes.get(n, {}).get(BLOCK, "?") for n in bound})
        state = (
            debug[group]["phase"]
            if group in debug
            else ("Scheduled" if len(bound) == len(pods) else "Pending")
        )
        rows.append(
            (
                group,
                state,
                f"{len(bound)}/{len(pods)}",
                str(len(set(bound))),
                ",".join(racks) or "-",
                ",".join(blocks) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def key_metrics(quorum_url: str) -> str:
    wanted = (
        "quorum_binds_total",
        "quorum_placements_total",
        "quorum_gangs{",
        "quorum_reserved_pods",
        "quorum_reservation_timeouts_total",
        "quorum_gang_backoffs_total",
        "quorum_gang_wait_seconds_sum",
        "quorum_gang_wait_seconds_count",
        "quorum_cache_objects",
    )
    lines = quorum_get(quorum_url, "/metrics").decode().splitlines()
    return "\n".join(line for line in lines if line.startswith(wanted) and not line.endswith(" 0.0"))


def fresh_namespace(core: client.CoreV1Api, ns: str) -> None:
    try:
        core.delete_namespace(ns)
        while True:
            core.read_namespace(ns)
            time.sleep(1)
    except ApiException:
        pass
    core.create_namespace({"metadata": {"name": ns}})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="demo")
    parser.add_argument("--quorum-url", default=os.environ.get("QUORUM_URL", "http://127.0.0.1:8888"))
    parser.add_argument("--existing-namespace", action="store_true",
                        help="use the namespace as it is (the test suite makes it) instead of a fresh one")
    args = parser.parse_args()
    config.load_kube_config()
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    ns = args.namespace
    if not args.existing_namespace:
        fresh_namespace(core, ns)

    steps = list(workloads.WORKLOADS.items())
    *first, (sweep_title, sweep) = steps
    for title, objs in first:
        print(f"submitting {title}")
        for obj in objs:
            create(api, ns, obj)
    for group, count in (("allreduce", 8), ("pretrain", 40), ("finetune", 4), ("notebook", 3)):
        took = wait_bound(core, ns, group, count, timeout=180)
        print(f"  {group}: {count} pods bound after {took:.1f}s")

    print(f"\nsubmitting {sweep_title}: more whole nodes than are free right now")
    for obj in sweep:
        create(api, ns, obj)
    time.sleep(10)
    gang = next(
        (
            g
            for g in orjson.loads(quorum_get(args.quorum_url, "/debug/gangs"))["gangs"]
            if g["gang"] == f"{ns}/sweep"
        ),
        None,
    )
    bound_now = sum(1 for p in pods_by_group(core, ns).get("sweep", []) if p.spec.node_name)
    print(f"  sweep: {bound_now} pods bound; Quorum says: {gang['reason'] if gang else 'unknown'}")
    if bound_now:
        raise SystemExit(f"demo: sweep bound {bound_now} of its pods while the whole gang did not fit")
    print("\n" + table(core, ns, args.quorum_url))

    print("\nallreduce finishes (its pods are deleted), freeing a rack")
    for pod in pods_by_group(core, ns)["allreduce"]:
        core.delete_namespaced_pod(pod.metadata.name, ns, grace_period_seconds=0)
    took = wait_bound(core, ns, "sweep", 24, timeout=180)
    print(f"  sweep: all 24 pods bound {took:.1f}s later\n")
    print(table(core, ns, args.quorum_url))
    print("\nQuorum metrics:\n" + key_metrics(args.quorum_url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
