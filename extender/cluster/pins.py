"""Where a pod's own nodeSelector pins it in the topology.

A queueing controller that places workloads itself (Kueue's topology-aware scheduling) writes each
pod's domain into its nodeSelector: the configured levels' labels, or only the host label when its
lowest level is the node. Members of one gang may be pinned to different domains, and planning must
then place each member where its pins allow (``topology/pinned.py``). Only labels planning knows on
every node are read: the levels' labels and the host label. Any other nodeSelector key is left to
kube-scheduler's filters, as for any pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .records import HOSTNAME_LABEL, NodeRecord, PodRecord

Pins = tuple[tuple[str, str], ...]


def topology_pins(pod: PodRecord, level_labels: Sequence[str]) -> Pins:
    """The (label, value) pairs of the pod's nodeSelector that place it in the topology."""
    if not pod.node_selector:
        return ()
    return tuple(kv for kv in pod.node_selector if kv[0] == HOSTNAME_LABEL or kv[0] in level_labels)


def node_matches(node: NodeRecord, pins: Pins, level_labels: Sequence[str]) -> bool:
    for label, value in pins:
        have = node.hostname if label == HOSTNAME_LABEL else node.domains[level_labels.index(label)]
        if have != value:
            return False
    return True


def pinned_nodes(nodes: Mapping[str, NodeRecord], pins: Pins, level_labels: Sequence[str]) -> list[str]:
    """Names of the nodes the pins allow. A host pin is looked up by name first (the host label is
    the node's name almost everywhere); otherwise every node is looked at."""
    host = dict(pins).get(HOSTNAME_LABEL)
    named = nodes.get(host) if host is not None else None
    if named is not None and named.hostname == host:
        return [named.name] if node_matches(named, pins, level_labels) else []
    return [name for name, node in nodes.items() if node_matches(node, pins, level_labels)]


def describe(pins: Pins) -> str:
    return ", ".join(f"{label}={value}" for label, value in pins)
