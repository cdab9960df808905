"""Well-formed requests, shaped as kube-scheduler sends them, that mutations start from.

Recorded payloads from ``tests/unit/data`` plus requests built for the fuzz world's own pods, so
that unmutated and lightly mutated inputs reach deep into the core (placement, reservations, held
binds, gang protection in preemption) instead of stopping at the first validation error.
"""

from __future__ import annotations

import json
from typing import Any

from tests.unit.fixtures import binding_args, extender_args, load, make_pod

from .world import NODE_NAMES, NODES, pods

VERBS = ("filter", "prioritize", "bind", "preempt")


def _pod_variants() -> list[dict[str, Any]]:
    """The world's pending pods, pods it has not seen, and pods with every way of asking for resources."""
    pending = [p for p in pods() if not p["spec"].get("nodeName")]
    unseen = [
        make_pod("fresh-0", "uid-fresh-0", gang_annotation="fresh", min_count=1, gpus=4),
        make_pod("fresh-1", "uid-fresh-1", group="train-a", gpus=4),
        make_pod("walk-in", "uid-walk-in", gpus=8),
    ]
    shaped = make_pod("shaped", "uid-shaped", cpu="500m", memory="1Gi", gpus=0)
    shaped["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "2Gi"}}},
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"cpu": "100m"}}},
    ]
    shaped["spec"]["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    shaped["spec"]["resources"] = {"requests": {"cpu": "4", "memory": "8Gi"}}
    return pending + unseen + [shaped]


def _node_name_sets() -> list[list[str]]:
    return [NODE_NAMES, NODE_NAMES[:4], NODE_NAMES[6:], [NODE_NAMES[0], "unknown-node"], []]


def extender_bases() -> list[dict[str, Any]]:
    """Filter / prioritize requests in both modes (names only, and full Node objects)."""
    bases = [load("filter_args_node_names.json"), load("filter_args_nodes.json")]
    for i, pod in enumerate(_pod_variants()):
        names = _node_name_sets()[i % len(_node_name_sets())]
        bases.append(json.loads(extender_args(pod, names=names)))
        if i % 3 == 0:
            bases.append(json.loads(extender_args(pod, nodes=NODES[: 3 + i % 5])))
    bases.append(json.loads(extender_args(_pod_variants()[0])))  # both node fields null
    return bases


def bind_bases() -> list[dict[str, Any]]:
    bases = [load("bind_args.json")]
    for pod in pods():
        meta = pod["metadata"]
        node = pod["spec"].get("nodeName") or NODE_NAMES[len(bases) % len(NODE_NAMES)]
        bases.append(json.loads(binding_args(meta["name"], meta["namespace"], meta["uid"], node)))
    bases.append(json.loads(binding_args("ghost", "ml", "uid-ghost", NODE_NAMES[0])))
    return bases


def preempt_bases() -> list[dict[str, Any]]:
    """Victims on the nodes where the world runs pods, in both the meta and the full form."""
    bases = [load("preempt_args_meta.json"), load("preempt_args_full.json")]
    running = [p for p in pods() if p["spec"].get("nodeName")]
    preemptor = make_pod("urgent", "uid-urgent", gpus=8)
    meta: dict[str, Any] = {}
    full: dict[str, Any] = {}
    for i, pod in enumerate(running):
        node = pod["spec"]["nodeName"]
        meta[node] = {"Pods": [{"UID": pod["metadata"]["uid"]}], "NumPDBViolations": i % 2}
        full[node] = {"Pods": [pod], "NumPDBViolations": 0}
    bases.append({"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": meta})
    bases.append({"Pod": preemptor, "NodeNameToVictims": full, "NodeNameToMetaVictims": None})
    return bases


def bases() -> dict[str, list[dict[str, Any]]]:
    extender = extender_bases()
    return {"filter": extender, "prioritize": extender, "bind": bind_bases(), "preempt": preempt_bases()}
