"""Preemption as kube-scheduler proposes it, minus what would break a running gang."""

from __future__ import annotations

from typing import Any

from .core import Core


def veto_gang_breaking(core: Core, victims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pass the scheduler's victims through, minus nodes whose eviction would break a gang
    running at exactly its quorum (evicting one member would strand the rest)."""
    out: dict[str, dict[str, Any]] = {}
    for node, entry in victims.items():
        uids = [p.get("UID", "") for p in entry.get("Pods", [])]
        if not uids or any(_breaks_gang(core, uid) for uid in uids):
            continue
        out[node] = entry
    return out


def _breaks_gang(core: Core, uid: str) -> bool:
    record = core.cache.pods.get(uid)
    if record is None or record.gang_key is None:
        return False
    spec = core.cache.gang_spec(record.gang_key)
    if spec is None or not spec.is_gang:
        return False
    return core.running_count(record.gang_key) <= spec.min_count
