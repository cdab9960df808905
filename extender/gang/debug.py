"""Read-only views of the gang core for /debug/gangs and the scrape-time gauges."""

from __future__ import annotations

from typing import Any

from ..cluster.records import GangSpec, PodRecord
from ..topology.placement import format_resources
from .core import Core
from .registry import GangRegistry
from .state import Phase


def phase_counts(registry: GangRegistry) -> dict[str, int]:
    counts = {str(phase): 0 for phase in Phase}
    for state in registry.gangs.values():
        counts[str(state.phase)] += 1
    return counts


def inflight(core: Core) -> dict[str, str]:
    """Pods bound by Quorum that the watch has not shown bound yet (pod -> node)."""
    pods = core.cache.pods
    return {(pods[uid].key if uid in pods else uid): node
            for uid, node in sorted(core.ledger.inflight().items())}


def gangs(core: Core, registry: GangRegistry) -> list[dict[str, Any]]:
    out = []
    now = core.clock()
    pods = core.cache.pods
    for key, state in sorted(registry.gangs.items()):
        spec = core.cache.gang_spec(key)
        members = core.cache.members(key)
        reservation = core.ledger.reservation_of(key)
        first = core.ledger.reserved_node(next(iter(reservation))) if reservation else None
        out.append({
            "gang": key,
            "phase": str(state.phase),
            "source": spec.source if spec else None,
            "minCount": spec.min_count if spec else None,
            "requiredTopology": spec.required_topology if spec else None,
            "preferredTopology": spec.preferred_topology if spec else None,
            "members": len(members),
            "bound": sorted(f"{m.name}@{m.node_name}" for m in members if m.holds_capacity),
            "reservation": {pods[u].name if u in pods else u: n for u, n in sorted(reservation.items())},
            "domain": "/".join(state.domain),
            "held": sorted(h.pod.name for h in state.held.values()),
            "bindsInFlight": state.binds_in_flight,
            "backoffSeconds": round(max(0.0, state.backoff_until - now), 1),
            "failures": state.failures,
            "reason": state.reason,
            "requests": format_resources(first.requests) if first else "{}",
            **(core.earmarks.view(key) if core.earmarks is not None else {}),
            **_composite(spec, members),
        })
    return out


def _composite(spec: GangSpec | None, members: list[PodRecord]) -> dict[str, Any]:
    """A composite's PodGroups (``parts``): each one's minCount, members and members bound."""
    if spec is None or not spec.min_parts:
        return {}
    return {"parts": [{"podGroup": part.key, "minCount": part.min_count,
                       "requiredTopology": part.required_topology,
                       "members": sum(1 for m in members if m.part == part.key),
                       "bound": sum(1 for m in members if m.part == part.key and m.holds_capacity)}
                      for part in spec.parts]}


def document(core: Core, registry: GangRegistry) -> dict[str, Any]:
    return {
        "gangs": gangs(core, registry),
        "reservedPods": core.ledger.reserved_pods(),
        "reservedNodes": core.ledger.reserved_nodes(),
        "inflightBinds": inflight(core),
        "claim": core.earmarks.document() if core.earmarks is not None else None,
        "cache": core.cache.counts(),
    }
