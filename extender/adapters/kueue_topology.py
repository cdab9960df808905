"""Topology levels read from a Kueue ``Topology`` object, for clusters that already describe their
topology to Kueue: the same node labels, in the same order (highest level first).

Read once at start, before anything is served (a blocking read is fine then): the levels shape the
cache's node index and every placement, so a change to the object takes a restart.
"""

from __future__ import annotations

import time
import urllib.error
from typing import Any

from ..config import ConfigError, TopologyLevel
from .kube import load_credentials, read_json

# Served versions, newest first: the Topology kept its shape across them.
KUEUE_TOPOLOGY_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1")


def levels_of(topology: dict[str, Any], name: str) -> tuple[TopologyLevel, ...]:
    """The levels of one Topology object; each level is named after its label's last segment
    ("cloud.provider.com/topology-rack" is "topology-rack")."""
    raw = (topology.get("spec") or {}).get("levels")
    labels = [level.get("nodeLabel") for level in raw or () if isinstance(level, dict)]
    if not labels or not all(isinstance(label, str) and label for label in labels):
        raise ConfigError(f"topology.kueueTopology: Topology {name!r} has no spec.levels[].nodeLabel")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"topology.kueueTopology: Topology {name!r} repeats a node label")
    names = [str(label).rsplit("/", 1)[-1] for label in labels]
    if len(set(names)) != len(names):  # two labels ending alike: name the levels by the whole label
        names = [str(label) for label in labels]
    return tuple(TopologyLevel(level, str(label)) for level, label in zip(names, labels, strict=True))


def read_levels(kubeconfig: str, name: str, wait_seconds: float = 30.0) -> tuple[TopologyLevel, ...]:
    """Fetch the named Topology (retrying while the apiserver is not reachable or the object is
    not there yet, up to ``wait_seconds``) and return its levels; a ConfigError says why not."""
    creds = load_credentials(kubeconfig)
    deadline = time.monotonic() + wait_seconds
    problem = ""
    while True:
        for api_version in KUEUE_TOPOLOGY_VERSIONS:
            try:
                doc = read_json(creds, f"/apis/{api_version}/topologies/{name}", timeout=10)
            except urllib.error.HTTPError as exc:
                problem = f"{api_version}: HTTP {exc.code}"
                continue
            except (OSError, ValueError) as exc:
                problem = f"{api_version}: {exc}"
                continue
            return levels_of(doc, name)
        if time.monotonic() >= deadline:
            raise ConfigError(f"topology.kueueTopology: cannot read Topology {name!r} ({problem})")
        time.sleep(1.0)
